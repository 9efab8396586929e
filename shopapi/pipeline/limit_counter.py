"""The counts behind every limit: fixed windows in the `limits` engine's storage (memory or
Redis), failing open when the storage does not answer. Design: docs/pipeline.md."""

import dataclasses
import math
import time

import limits
from connexion.exceptions import ProblemException
from limits.aio.storage import Storage
from limits.errors import StorageError

from shopapi.internals import limits as limits_internals
from shopapi.telemetry import metrics
from shopapi.telemetry.outages import Outages

# After a storage failure, requests go unlimited this long before the store is tried again: a
# dead Redis then costs one failed call a second, not one per request.
RETRY_STORAGE_AFTER = 1.0
# Redis must answer within this, or the request goes on without a limit.
REDIS_TIMEOUT = 0.25
# The window ends this process remembers (one per limit and caller, about 150 bytes each, from
# a traced worker under the soak) spare a storage call per hit. The ended ones are dropped once a
# minute, so the cache holds the callers of about the last window, not every caller since
# start-up: the soak's 10,000 users, each hitting four limits, grew it towards 40,000 entries
# (6 MB a worker) before this. Many callers within one window fill it to at most
# MAX_WINDOWS_KNOWN (15 MB); past that it starts over, and each caller's next hit costs one more
# storage call.
MAX_WINDOWS_KNOWN = 100_000
FORGET_ENDED_WINDOWS_EVERY = 60.0


def scaled(limit: str, scale: float) -> limits.RateLimitItem:
    """Parse "1000/minute" and multiply its amount by `scale` (at least 1)."""
    return _times(limits.parse(limit), scale)


def scaled_each(windows: str, scale: float) -> list[limits.RateLimitItem]:
    """Parse "10/15 minutes; 50/day" (one limit per window), each scaled as `scaled` does."""
    return [_times(item, scale) for item in limits.parse_many(windows)]


def _times(item: limits.RateLimitItem, scale: float) -> limits.RateLimitItem:
    return type(item)(max(1, round(item.amount * scale)), item.multiples)


@dataclasses.dataclass(frozen=True)
class Usage:
    """A client's use of one limit in its current window."""

    limit: limits.RateLimitItem
    count: int
    reset_after: int  # seconds until the window starts over

    @property
    def exceeded(self) -> bool:
        return self.count > self.limit.amount

    def headers(self) -> dict[str, str]:
        """The `RateLimit-*` headers (draft-ietf-httpapi-ratelimit-headers)."""
        return {
            "RateLimit-Limit": str(self.limit.amount),
            "RateLimit-Remaining": str(max(0, self.limit.amount - self.count)),
            "RateLimit-Reset": str(self.reset_after),
            "RateLimit-Policy": f"{self.limit.amount};w={self.limit.get_expiry()}",
        }


class TooManyRequests(ProblemException):
    def __init__(self, usage: Usage, detail: str):
        super().__init__(
            status=429,
            title="Too Many Requests",
            detail=detail,
            headers={"Retry-After": str(max(1, usage.reset_after)), **usage.headers()},
        )


def _storage(uri: str) -> Storage:
    if uri.startswith("memory"):
        return limits.storage.storage_from_string("async+memory://")
    return limits.storage.storage_from_string(
        f"async+{uri}",
        implementation="redispy",
        key_prefix="shopapi",
        wrap_exceptions=True,
        socket_timeout=REDIS_TIMEOUT,
        socket_connect_timeout=REDIS_TIMEOUT,
        # redis-py retries a failed command with backoff by default; a limit is not worth the
        # wait: fail open at once.
        retry_on_error=[],
        retry=None,
    )


class LimitCounter:
    """Counts hits in the storage, failing open."""

    def __init__(
        self,
        storage_uri: str,
        max_windows: int = MAX_WINDOWS_KNOWN,
        forget_ended_every: float = FORGET_ENDED_WINDOWS_EVERY,
    ):
        self.storage = _storage(storage_uri)
        self._outages = Outages("rate limit storage", "serving without limits", RETRY_STORAGE_AFTER)
        # When each key's current window ends (wall clock), as far as this process knows: the
        # storage is asked only for windows this process has not seen start.
        self._window_ends: dict[str, float] = {}
        self._max_windows = max_windows
        self._forget_ended_every = forget_ended_every
        self._forget_ended_at = time.time() + forget_ended_every

    @property
    def windows_known(self) -> int:
        """How many windows' ends this process remembers."""
        return len(self._window_ends)

    async def hit(self, limit: limits.RateLimitItem, *identifiers: str) -> Usage | None:
        """Count one hit; None when the storage is unavailable."""
        answer = await self.hit_and_get(limit, identifiers)
        return None if answer is None else answer[0]

    async def hit_and_get(
        self, limit: limits.RateLimitItem, identifiers: tuple[str, ...], other_key: str = ""
    ) -> tuple[Usage, bytes | None] | None:
        """Count one hit, and read `other_key` of the same Redis (counts in Redis only) in the
        same round trip (none without one): the usage and that key's value; None when the
        storage is unavailable."""
        if self._outages.pausing:
            metrics.RATE_LIMIT_STORAGE_ERRORS.inc()
            return None
        key = limit.key_for(*identifiers)
        try:
            if other_key:
                count, value = await limits_internals.hit_and_get(
                    self.storage, key, limit.get_expiry(), other_key
                )
            else:
                count, value = await self.storage.incr(key, limit.get_expiry()), None
            reset_at = await self._window_end(key, limit, opened_here=count == 1)
        except StorageError as error:
            self._failed(error)
            return None
        self._outages.answered()
        return Usage(limit, count, max(0, math.ceil(reset_at - time.time()))), value

    async def peek(self, limit: limits.RateLimitItem, *identifiers: str) -> Usage | None:
        """The hits counted in the current window, counting none; None when the storage is
        unavailable."""
        answer = await self.peek_and_get(limit, identifiers)
        return None if answer is None else answer[0]

    async def peek_and_get(
        self, limit: limits.RateLimitItem, identifiers: tuple[str, ...], other_key: str = ""
    ) -> tuple[Usage, bytes | None] | None:
        """`peek`, and `other_key` read in the same round trip, as `hit_and_get` does."""
        if self._outages.pausing:
            metrics.RATE_LIMIT_STORAGE_ERRORS.inc()
            return None
        key = limit.key_for(*identifiers)
        try:
            if other_key:
                count, value = await limits_internals.count_and_get(self.storage, key, other_key)
            else:
                count, value = await self.storage.get(key), None
            reset_at = await self._window_end(key, limit, opened_here=False) if count else None
        except StorageError as error:
            self._failed(error)
            return None
        self._outages.answered()
        if reset_at is None:  # no window open: the next hit opens one
            return Usage(limit, 0, limit.get_expiry()), value
        return Usage(limit, count, max(0, math.ceil(reset_at - time.time()))), value

    async def refund(self, limit: limits.RateLimitItem, *identifiers: str) -> None:
        """Take back one hit counted in the current window (nothing when the store fails)."""
        key = limit.key_for(*identifiers)
        await self._quietly(lambda: self.storage.incr(key, limit.get_expiry(), -1))

    async def clear(self, limit: limits.RateLimitItem, *identifiers: str) -> None:
        """Forget every hit counted in the current window (nothing when the store fails)."""
        key = limit.key_for(*identifiers)
        await self._quietly(lambda: self.storage.clear(key))

    async def remember(self, key: str, seconds: int) -> None:
        """Note `key` for `seconds` from now, however long it was noted for before."""

        async def note_again():
            await self.storage.clear(key)
            await self.storage.incr(key, seconds)

        await self._quietly(note_again)

    async def remembers(self, key: str) -> bool:
        """Whether `key` is noted (`remember`); False when the store fails."""
        return bool(await self._quietly(lambda: self.storage.get(key)))

    async def _quietly(self, call):
        """`call()`'s answer, or None when the store fails or failed a moment ago."""
        if self._outages.pausing:
            return None
        try:
            answer = await call()
        except StorageError as error:
            self._failed(error)
            return None
        self._outages.answered()
        return answer

    def _failed(self, error: StorageError) -> None:
        metrics.RATE_LIMIT_STORAGE_ERRORS.inc()
        self._outages.failed(error.storage_error)

    async def _window_end(self, key: str, limit: limits.RateLimitItem, opened_here: bool) -> float:
        """When the key's current window ends: a hit that counted 1 opened it here; a window
        opened elsewhere (another worker or host) costs one more storage call, once."""
        now = time.time()
        if opened_here:
            end = now + limit.get_expiry()
        else:
            end = self._window_ends.get(key, 0.0)
            if end <= now:
                end = await self.storage.get_expiry(key)
        if len(self._window_ends) >= self._max_windows or now >= self._forget_ended_at:
            self._forget_ended_windows(now)
        self._window_ends[key] = end
        return end

    def _forget_ended_windows(self, now: float) -> None:
        current = {k: e for k, e in self._window_ends.items() if e > now}
        self._window_ends = current if len(current) < self._max_windows // 2 else {}
        self._forget_ended_at = now + self._forget_ended_every
