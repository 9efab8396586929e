"""Which access tokens are revoked, as this process knows it: a user's tokens of a credentials
version older than their latest revocation, and the tokens of an ended login
(models/revocation.py), kept in memory and read anew at most every REFRESH_EVERY seconds. What
that promises, and costs: docs/auth.md."""

import datetime
import threading
import time

from models.db import database
from models.revocation import Revocation, recorded_here

REFRESH_EVERY = 1.0
# A revocation matters while a token issued before it can still be unexpired: ACCESS_TOKEN_TTL
# is at most a day, a token is accepted 30 s past its expiry (shopapi/auth/tokens.py), and the
# hosts' clocks may differ a little. Older ones are forgotten, and not read at start-up.
KEEP_SECONDS = 24 * 3600 + 30 + 600
PRUNE_EVERY = 60.0


class Revocations:
    def __init__(self):
        # User id -> the oldest credentials version still valid; and when it was revoked.
        self._valid_from: dict[int, int] = {}
        self._revoked_at: dict[int, float] = {}
        # Ended logins (refresh token families) -> when they were ended.
        self._ended: dict[str, float] = {}
        # Raised whenever `refuses` may refuse more: what holds credentials it accepted earlier (an
        # open event stream) checks them again.
        self.changes = 0
        self._last_id: int | None = None
        self._fresh_until = float("-inf")
        self._recorded_seen = recorded_here()
        self._pruned_at = time.monotonic()
        self._lock = threading.Lock()

    def is_current(self) -> bool:
        """Whether `refuses` may answer now without a refresh first."""
        return time.monotonic() < self._fresh_until and self._recorded_seen == recorded_here()

    def refuses(self, user_id: int, credentials_version: int) -> bool:
        """Whether a token of `user_id` issued under `credentials_version` is revoked."""
        return credentials_version < self._valid_from.get(user_id, 0)

    def ended(self, login: str) -> bool:
        """Whether the login (a refresh token family) a token was issued to has been ended."""
        return login in self._ended

    def ends(self, user_id: int, credentials_version: int, login: str | None) -> bool:
        """Whether credentials of `user_id`, issued under `credentials_version` to `login` (if
        any), are refused now, one way or the other."""
        return self.refuses(user_id, credentials_version) or (
            login is not None and self.ended(login)
        )

    def refresh(self) -> None:
        """Read what was revoked since the last refresh, unless another thread just did. Blocks
        on the database: call it off the event loop."""
        with self._lock:
            if self.is_current():
                return
            started, recorded = time.monotonic(), recorded_here()
            with database.connection_context():
                if self._last_id is None:
                    cutoff = datetime.datetime.now(datetime.UTC) - datetime.timedelta(
                        seconds=KEEP_SECONDS
                    )
                    last_id, rows = Revocation.since(cutoff)
                else:
                    rows = Revocation.after(self._last_id)
                    last_id = rows[-1][0] if rows else self._last_id
            for _, user_id, version, revoked_at, login in rows:
                if login is not None:
                    self._ended[login] = revoked_at
                    self.changes += 1
                elif version > self._valid_from.get(user_id, 0):
                    self._valid_from[user_id] = version
                    self._revoked_at[user_id] = revoked_at
                    self.changes += 1
            self._last_id = last_id
            self._recorded_seen = recorded
            self._fresh_until = started + REFRESH_EVERY
            if started - self._pruned_at > PRUNE_EVERY:
                self._prune()
                self._pruned_at = started

    def _prune(self) -> None:
        cutoff = time.time() - KEEP_SECONDS
        for user_id in [u for u, at in self._revoked_at.items() if at < cutoff]:
            del self._valid_from[user_id], self._revoked_at[user_id]
        for login in [login for login, at in self._ended.items() if at < cutoff]:
            del self._ended[login]

    def forget(self) -> None:
        """Start over from the table (the tests empty the database and restart its ids)."""
        with self._lock:
            self._valid_from.clear()
            self._revoked_at.clear()
            self._ended.clear()
            self._last_id = None
            self._fresh_until = float("-inf")
