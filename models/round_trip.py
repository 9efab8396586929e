"""The primary's round trip from this process: `SELECT 1` timed every EVERY seconds by a thread
of its own on a connection of its own, off the requests' path; and whether this host's path to
the database is slow enough, against its peers', to leave the balancer's rotation
(docs/telemetry.md, "A slow database path")."""

import collections
import logging
import os
import statistics
import time
from collections.abc import Callable

import peewee

from models.background import repeat
from models.replicas import checker, one_row

log = logging.getLogger("shopapi.database")

EVERY = 1.0
# The median of the last five: one slow answer is no slow path.
SAMPLES = 5
# A host leaves rotation only while its round trip is this many times the fastest peer's: a
# database slow for every host (a busy pool, a busy server) must not empty the rotation.
PEER_FACTOR = 3
# It comes back once under half the threshold, or under this many times the fastest peer's, so
# that a round trip near the threshold does not flap in and out.
BACK_FACTOR = 1.5
# A measurement waiting longer than this is a path that does not answer.
STALLED_SECONDS = SAMPLES * EVERY
# The measurements run while a balancer asks (/readyz), and stop this long after it last did:
# an app no one probes (a test's, a command's) keeps no thread and no connection.
IDLE_SECONDS = 30


class RoundTrip:
    """`url`'s round trip; slow above `slow_ms`. `peers(own_seconds)` shares this process's
    median and answers the fastest peer's (None: no peer answered); `observe(seconds)` gets
    each median (metrics)."""

    def __init__(
        self,
        url: str,
        slow_ms: int,
        peers: Callable[[float], float | None] | None = None,
        observe: Callable[[float], None] = lambda seconds: None,
    ):
        self.slow_seconds = slow_ms / 1000
        self._checker = checker(url, "shopapi round trip")
        self._peers, self._observe = peers, observe
        self._samples: collections.deque[float] = collections.deque(maxlen=SAMPLES)
        self._measuring_since: float | None = None
        self._why_slow: str | None = None
        self._checking_in: int | None = None  # the process whose thread measures (forks)
        self._asked_at = 0.0

    def why_slow(self) -> str | None:
        """Why this host should leave rotation now, or None."""
        self._asked_at = time.monotonic()
        if self._checking_in != os.getpid():
            self._start()
        since = self._measuring_since
        if since is not None and time.monotonic() - since > STALLED_SECONDS:
            return f"the database has not answered a round trip for {STALLED_SECONDS:g} s"
        return self._why_slow

    def measure(self) -> None:
        """One round trip, then the verdict on the last SAMPLES."""
        self._measuring_since = started = time.monotonic()
        try:
            one_row(self._checker, "SELECT 1")
        except (peewee.DatabaseError, peewee.InterfaceError):
            return  # a database that does not answer is the readiness check's to say
        finally:
            self._measuring_since = None
        self._samples.append(time.monotonic() - started)
        median = statistics.median(self._samples)
        self._observe(median)
        fastest = self._peers(median) if self._peers else None
        self._judge(median, fastest)

    def _judge(self, median: float, fastest: float | None) -> None:
        if fastest is None or self.slow_seconds <= 0:
            slow = False
        elif self._why_slow is None:
            slow = median > self.slow_seconds and median > PEER_FACTOR * fastest
        else:
            slow = median >= self.slow_seconds / 2 and median >= BACK_FACTOR * fastest
        if slow == (self._why_slow is not None):
            return
        if slow:
            self._why_slow = (
                f"this host's database round trip ({median * 1000:.0f} ms, the median of the "
                f"last {len(self._samples)}) is over {self.slow_seconds * 1000:g} ms and "
                f"{PEER_FACTOR} times another host's ({fastest * 1000:.1f} ms)"
            )
            log.warning("out of rotation: %s", self._why_slow)
        else:
            log.info("back in rotation: database round trip %.1f ms", median * 1000)
            self._why_slow = None

    def _start(self) -> None:
        self._checking_in = os.getpid()
        self._samples.clear()
        repeat(self.measure, EVERY, "round-trip", while_=self._still_asked)

    def _still_asked(self) -> bool:
        """Whether a probe asked lately; if not, the measurements end until the next one."""
        if time.monotonic() - self._asked_at < IDLE_SECONDS:
            return True
        self._checker.close()
        self._why_slow, self._checking_in = None, None
        return False
