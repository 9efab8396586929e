"""Where each caller's latest write left the primary's WAL, kept as long as a replica may take to
replay it: in this process, or in the rate limits' Redis so that every worker and host knows.
Why by WAL position: docs/database.md."""

import time

import redis.asyncio
import redis.exceptions

from shopapi.telemetry.outages import Outages

# Callers whose write this process remembers; beyond this many the expired ones are dropped,
# then the oldest (those callers' next reads go to the primary, which is never wrong).
MAX_CALLERS_KNOWN = 100_000
# Redis must answer within this; after a failure it is left alone this long.
REDIS_TIMEOUT = 0.25
RETRY_STORAGE_AFTER = 1.0
# Keeps the highest position: two hosts noting one caller's writes may finish in any order.
_NOTE_HIGHEST = """
local current = tonumber(redis.call('GET', KEYS[1]) or '-1')
if tonumber(ARGV[1]) > current then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
"""


# The scope's state holds, under this, the caller's mark as the rate limit read it along with
# its hit (bytes, or None when there is none): read routing then need not ask Redis again.
READ_ALONG = "write_mark_read_along"


class MarksUnavailable(Exception):
    """The store did not answer: whether the caller wrote is unknown."""


class MemoryMarks:
    def __init__(self, keep_seconds: float):
        self.keep_seconds = keep_seconds
        self._marks: dict[str, tuple[int, float]] = {}  # caller -> (position, expiry)

    async def written_at(self, caller: str) -> int | None:
        mark = self._marks.get(caller)
        if mark is None or mark[1] < time.monotonic():
            return None
        return mark[0]

    async def note(self, caller: str, position: int) -> None:
        now = time.monotonic()
        if caller not in self._marks and len(self._marks) >= MAX_CALLERS_KNOWN:
            self._marks = {c: m for c, m in self._marks.items() if m[1] >= now}
            for oldest in list(self._marks)[: max(0, len(self._marks) - MAX_CALLERS_KNOWN // 2)]:
                del self._marks[oldest]
        previous = self._marks.pop(caller, (-1, 0.0))[0]
        self._marks[caller] = (max(previous, position), now + self.keep_seconds)


class RedisMarks:
    def __init__(self, uri: str, keep_seconds: float):
        # The limits engine's redis+unix:// is redis-py's unix://.
        self.redis = redis.asyncio.Redis.from_url(
            uri.replace("redis+unix://", "unix://", 1),
            socket_timeout=REDIS_TIMEOUT,
            socket_connect_timeout=REDIS_TIMEOUT,
            retry_on_error=[],
            retry=None,
        )
        self.keep_seconds = keep_seconds
        self.keep_ms = int(keep_seconds * 1000)
        self._note_highest = self.redis.register_script(_NOTE_HIGHEST)
        self._outages = Outages(
            "write marks' Redis", "reads go to the primary", RETRY_STORAGE_AFTER
        )
        # Until then the marks in Redis may lack writes made while it was away.
        self._incomplete_until = 0.0

    @staticmethod
    def key_of(caller: str) -> str:
        return f"shopapi:written-at:{caller}"

    async def written_at(self, caller: str) -> int | None:
        self._check_complete()
        try:
            value = await self.redis.get(self.key_of(caller))
        except redis.exceptions.RedisError as error:
            self._outages.failed(error)
            raise MarksUnavailable from None
        return self.written_at_from(value)

    def written_at_from(self, value: bytes | None) -> int | None:
        """The caller's mark from `value`, its key's value as Redis just answered it (here or
        along with the rate limit's hit)."""
        self._check_complete()
        if self._answered():
            raise MarksUnavailable  # this caller's write may be among those noted nowhere
        return None if value is None else int(value)

    def _check_complete(self) -> None:
        if self._outages.pausing or time.monotonic() < self._incomplete_until:
            raise MarksUnavailable

    async def note(self, caller: str, position: int) -> None:
        if not self._outages.pausing:  # else asked again a moment later, not by every write
            try:
                await self._note_highest(keys=[self.key_of(caller)], args=[position, self.keep_ms])
                self._answered()
                return
            except redis.exceptions.RedisError as error:
                self._outages.failed(error)
        self._incomplete()

    def _answered(self) -> bool:
        """Note Redis's answer; whether it ends an outage, after which the marks lack what was
        written meanwhile, here or in other processes."""
        if self._outages.answered():
            self._incomplete()
            return True
        return False

    def _incomplete(self) -> None:
        # A write noted nowhere: until a replica may have replayed it, every read goes to the
        # primary, or its caller could miss it.
        self._incomplete_until = time.monotonic() + self.keep_seconds


def write_marks(storage_uri: str, keep_seconds: float) -> MemoryMarks | RedisMarks:
    """The marks in SHARED_STORE_URL's store (memory://, or Redis)."""
    if storage_uri.startswith("memory"):
        return MemoryMarks(keep_seconds)
    return RedisMarks(storage_uri, keep_seconds)
