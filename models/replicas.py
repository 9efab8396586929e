"""The read replicas: each one's pool, whether it answers, and how far behind the primary it is,
checked by a thread of each process every CHECK_EVERY seconds, off the requests' path. Which
replica a read may use: docs/database.md."""

import collections
import contextlib
import itertools
import logging
import os
import threading
import time
from urllib.parse import urlsplit

import peewee

from models.bounds import UNBOUNDED, Bounds
from models.db import open_database, postgresql_arguments
from models.routing import WAL_POSITION

log = logging.getLogger("shopapi.database")

CHECK_EVERY = 0.25
# A check waits this long for a connection or an answer: a replica slower than this is down.
CHECK_TIMEOUT_SECONDS = 1
# Where a replica has replayed the WAL to (NULL on a server that is not in recovery: then where
# it writes, so that a primary named as a replica counts as current).
REPLAY_POSITION = (
    "SELECT pg_wal_lsn_diff(COALESCE(pg_last_wal_replay_lsn(), pg_current_wal_lsn()), '0/0')"
    "::bigint"
)


# The checks' statement timeout, set per check: PgBouncer refuses it as a startup parameter
# (`options`), and a session's SET would outlive the check on a pooled server connection.
# Two statements in one query are one transaction, which SET LOCAL lasts for.
TIMEOUT = f"SET LOCAL statement_timeout = {CHECK_TIMEOUT_SECONDS * 1000}; "


def _checker(url: str) -> peewee.PostgresqlDatabase:
    """A connection of its own for the checks: never one a request waits for."""
    return peewee.PostgresqlDatabase(
        **postgresql_arguments(url),
        connect_timeout=CHECK_TIMEOUT_SECONDS,
        application_name="shopapi replica check",
    )


def _position(checker: peewee.PostgresqlDatabase, sql: str) -> int:
    """One WAL position from `checker`, reconnecting if its connection was lost."""
    try:
        if checker.is_closed():
            checker.connect()
        return checker.execute_sql(TIMEOUT + sql).fetchone()[0]
    except (peewee.DatabaseError, peewee.InterfaceError):
        checker.close()
        raise


class Replica:
    def __init__(self, url: str, pool_size: int, bounds: Bounds):
        parts = urlsplit(url)
        # For logs and metrics: where it is, without its password.
        self.name = f"{parts.hostname}:{parts.port or 5432}{parts.path}"
        self.database = open_database(url, pool_size, bounds=bounds)
        self.checker = _checker(url)
        self.up = False  # until its first check answers
        self.replayed = -1  # the WAL position it has replayed to
        self.lag_seconds = float("inf")


class Replicas:
    """The replicas of `primary_url`, each skipped while it is down or more than
    `max_lag_seconds` behind the primary."""

    def __init__(
        self,
        primary_url: str,
        urls,
        pool_size: int,
        max_lag_seconds: float,
        bounds: Bounds = UNBOUNDED,
    ):
        self.members = [Replica(url, pool_size, bounds) for url in urls]
        self.max_lag_seconds = max_lag_seconds
        self._primary = _checker(primary_url)
        # The primary's WAL position at each check, as long as a lag within the bound can need.
        self._history: collections.deque[tuple[float, int]] = collections.deque()
        self._turns = itertools.count()
        self._checking_in: int | None = None  # the process whose thread checks (gunicorn forks)

    def choose(self, written_at: int | None) -> peewee.Database | None:
        """A replica that is up, within the lag bound and, when the caller wrote at
        `written_at`, has replayed that far; in turns. None: the primary must answer."""
        if self._checking_in != os.getpid():
            self._start_checking()
        usable = [
            replica
            for replica in self.members
            if replica.up
            and replica.lag_seconds <= self.max_lag_seconds
            and (written_at is None or replica.replayed >= written_at)
        ]
        if not usable:
            return None
        return usable[next(self._turns) % len(usable)].database

    def failed(self, database: peewee.Database, error: Exception) -> None:
        """A request's query failed on `database`: if the connection failed, skip that replica
        until its next check answers."""
        if not isinstance(error, peewee.OperationalError | peewee.InterfaceError):
            return
        for replica in self.members:
            if replica.database is database and replica.up:
                replica.up = False
                log.warning("replica %s failed, reads go elsewhere: %s", replica.name, error)

    def check(self) -> None:
        """Read the primary's WAL position, then each replica's, and work out each lag."""
        now = time.monotonic()
        # If the primary does not answer, the replicas are judged against what it last said.
        with contextlib.suppress(peewee.DatabaseError, peewee.InterfaceError):
            self._history.append((now, _position(self._primary, WAL_POSITION)))
        keep = self.max_lag_seconds + 2 * CHECK_EVERY + 1
        while len(self._history) > 1 and self._history[0][0] < now - keep:
            self._history.popleft()
        for replica in self.members:
            self._check(replica)

    def _check(self, replica: Replica) -> None:
        try:
            replica.replayed = _position(replica.checker, REPLAY_POSITION)
        except (peewee.DatabaseError, peewee.InterfaceError) as error:
            if replica.up:
                log.warning("replica %s is down, reads go elsewhere: %s", replica.name, error)
            replica.up, replica.lag_seconds = False, float("inf")
            return
        replica.lag_seconds = self._lag(replica.replayed)
        if not replica.up:
            log.info("replica %s answers, %.1f s behind", replica.name, replica.lag_seconds)
        replica.up = True

    def _lag(self, replayed: int) -> float:
        """How long ago the primary first had WAL that the replica has not replayed: 0 if it has
        replayed all the primary had at the last check."""
        behind = next((at for at, position in self._history if position > replayed), None)
        return 0.0 if behind is None else time.monotonic() - behind

    def _start_checking(self) -> None:
        self._checking_in = os.getpid()
        threading.Thread(target=self._check_forever, name="replica-checks", daemon=True).start()

    def _check_forever(self) -> None:
        while True:
            started = time.monotonic()
            try:
                self.check()
            except Exception:  # a bug here must not stop the checks, nor go unseen
                log.exception("replica check failed")
            time.sleep(max(0.0, CHECK_EVERY - (time.monotonic() - started)))
