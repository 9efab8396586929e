"""Admission control: at most a number of a server process's requests executing at once, a short
line of others waiting first come, first served, and beyond it a 503 with Retry-After at once,
before the request costs anything more (its credentials, its rate limit, its validation).
Design: docs/pipeline.md ("admission.py")."""

import asyncio
import collections
import contextlib
import logging
import math
import time

from connexion.exceptions import ProblemException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shopapi.pipeline.buffered_body import read_body, replay_body
from shopapi.pipeline.request_facts import operation_of
from shopapi.telemetry import metrics

log = logging.getLogger("shopapi.admission")

# A shed request may come back this soon: a queue that was full drains in well under a second.
RETRY_AFTER_SECONDS = 1
# In a shed request's scope state: the request log has no line for it (pipeline/observability.py),
# this layer's warning says how many there were.
SHED = "shed"
# Shedding is logged at most this often, with how many were shed meanwhile.
LOG_EVERY_SECONDS = 10.0


class Admission:
    """One server process's gate, as HAProxy's maxconn, maxqueue and timeout queue are for a
    server: `limit` requests execute at once; a newcomer beyond them waits in line, first come
    first served, if fewer than `queue` are waiting, else it is refused at once; a waiter still
    in line after its wait is refused then.

    The wait adapts, as Facebook's controlled delay does ("Fail at Scale", 2015): a line that
    refused no one for `max_wait` is absorbing a burst, and a newcomer may wait `max_wait`; once
    it has refused someone (full, or a waiter's wait ran out) it is standing, the server getting
    more than it answers, and a newcomer waits at most `standing_wait`, so that those served
    are served with little delay and the rest learn at once to come back. Whether the line is
    empty says nothing of this: under overload it empties and fills many times a second.

    It lives on the event loop's thread, as every layer does: no lock."""

    def __init__(self, limit: int, queue: int, max_wait: float, standing_wait: float | None = None):
        self.limit = limit
        self.queue = queue
        self.max_wait = max_wait
        self.standing_wait = max_wait if standing_wait is None else min(standing_wait, max_wait)
        self.executing = 0
        self.waiting: collections.deque[asyncio.Future] = collections.deque()
        # On the loop's clock: when this gate last refused someone.
        self.refused_at = -math.inf

    async def enter(self) -> bool:
        """Whether the request may execute (then `leave()` when it is done), waiting if need be."""
        if self.executing < self.limit and not self.waiting:
            self.executing += 1
            return True
        loop = asyncio.get_running_loop()
        if len(self.waiting) >= self.queue:
            self.refused_at = loop.time()
            return False
        standing = loop.time() - self.refused_at < self.max_wait
        turn = loop.create_future()
        self.waiting.append(turn)
        try:
            async with asyncio.timeout(self.standing_wait if standing else self.max_wait):
                await turn
        except TimeoutError:
            if turn.done() and not turn.cancelled():
                return True  # handed a place as the deadline came: it is taken
            self._give_up(turn)
            self.refused_at = loop.time()
            return False
        except BaseException:
            # Cancelled while waiting (the server stopping): give back a place it was handed.
            if turn.done() and not turn.cancelled():
                self.leave()
            else:
                self._give_up(turn)
            raise
        return True

    def _give_up(self, turn: asyncio.Future) -> None:
        # The timeout cancelled the turn at once, and a leave() since may have dropped it.
        with contextlib.suppress(ValueError):
            self.waiting.remove(turn)

    def leave(self) -> None:
        """A request that entered is done: its place goes to the first in line, or is freed."""
        while self.waiting:
            turn = self.waiting.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self.executing -= 1


class AdmissionMiddleware:
    """After the body limit: an operation whose contract declares a 503 may be shed, unless
    a balancer polls it (`x-probe`) or it lasts as long as its client (`long_lived`: the event
    stream, which has limits of its own). A shed request is a 503 problem with Retry-After,
    counted (`http_requests_shed_total`) and logged at a bounded rate."""

    def __init__(
        self,
        app: ASGIApp,
        concurrency: int,
        queue: int,
        max_wait_seconds: float,
        standing_wait_seconds: float | None = None,
        long_lived: frozenset[str] = frozenset(),
    ):
        self.app = app
        self.admission = Admission(concurrency, queue, max_wait_seconds, standing_wait_seconds)
        self.long_lived = long_lived
        self.shed_since_logged = 0
        self.logged_at = -LOG_EVERY_SECONDS

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        operation = scope["type"] == "http" and operation_of(scope)
        if not operation or not operation.sheddable or operation.id in self.long_lived:
            await self.app(scope, receive, send)
            return
        if operation.media_types:
            # A body trickling in would hold its place for as long as it takes (seconds: the
            # body timeout and rate of pipeline/http_server.py), so it is read first. The body
            # limit, outside, has capped it.
            body = await read_body(receive)
            receive = replay_body(body, receive)
        if not await self.admission.enter():
            scope["state"][SHED] = True
            raise self._shed(operation.id)
        entered = True

        def done() -> None:
            nonlocal entered
            if entered:
                entered = False
                self.admission.leave()

        async def send_then_leave(message: Message) -> None:
            # The work is done once the last of the body is handed over: a client slow to read
            # it holds its connection (pipeline/http_server.py bounds that), not a place.
            if message["type"] == "http.response.body" and not message.get("more_body"):
                done()
            await send(message)

        try:
            await self.app(scope, receive, send_then_leave)
        finally:
            done()

    def _shed(self, operation: str) -> ProblemException:
        metrics.REQUESTS_SHED.labels(operation).inc()
        self.shed_since_logged += 1
        now = time.monotonic()
        if now - self.logged_at >= LOG_EVERY_SECONDS:
            log.warning(
                "shedding load: %d requests refused (503) since this was last said; "
                "%d executing, %d waiting",
                self.shed_since_logged,
                self.admission.executing,
                len(self.admission.waiting),
            )
            self.shed_since_logged, self.logged_at = 0, now
        return ProblemException(
            status=503,
            title="Service Unavailable",
            detail="This server is busy with as many requests as it can answer promptly; "
            f"try again in {RETRY_AFTER_SECONDS} s.",
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )
