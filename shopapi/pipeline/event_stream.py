"""`GET /events/stream` answered here, before Flask: Server-Sent Events fed by this process's
poller (shopapi/events/stream_poller.py), so that a waiting stream holds neither a Flask thread
nor a database connection. Design: docs/pipeline.md and docs/events.md."""

import asyncio
import contextlib
import functools
import logging
import time

import orjson
import peewee
from connexion.exceptions import Forbidden, ProblemException
from starlette.types import ASGIApp, Receive, Scope, Send

from models import Event
from shopapi.auth.security import EXPIRES_AT, Principal, revocable
from shopapi.events.payloads import event_payload, readable_resource_types
from shopapi.events.stream_poller import BATCH, EventStreams, StreamsFull, Subscription
from shopapi.internals import connexion as connexion_internals
from shopapi.pipeline.request_facts import caller_of, operation_of
from shopapi.telemetry import metrics
from shopapi.web.jsonifier import OPTIONS
from shopapi.web.representations import Shape, version_of

log = logging.getLogger("shopapi.events.stream")

OPERATION_ID = "stream_events"
# How long a client waits before it reconnects (the stream's `retry:` field), in milliseconds.
RETRY_MS = 3000
# When to ask again after a refusal for too many streams: one ends when its client goes.
REFUSED_RETRY_AFTER = 10
HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-store"),
    # nginx buffers a response unless told not to; a buffered stream arrives late or never.
    (b"x-accel-buffering", b"no"),
]
HEARTBEAT = b": keep-alive\n\n"


class EventStreamMiddleware:
    """Answers the event stream operation once security, the rate limit and validation have let
    it through; every other request goes on inwards."""

    OPERATION_ID = OPERATION_ID

    def __init__(
        self,
        app: ASGIApp,
        streams: EventStreams,
        heartbeat_seconds: float,
        max_seconds: float,
        event_shapes: dict[int, Shape | None],
    ):
        """`event_shapes`: how each version shows an event (shopapi/contract/shapes.py)."""
        self.app = app
        self.streams = streams
        self.event_shapes = event_shapes
        self.heartbeat_seconds = heartbeat_seconds
        self.max_seconds = max_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        operation = operation_of(scope) if scope["type"] == "http" else None
        if operation is None or operation.id != OPERATION_ID:
            await self.app(scope, receive, send)
            return
        info = connexion_internals.token_info(scope)
        deadline = _deadline(self.max_seconds, info.get(EXPIRES_AT))
        principal = Principal.of(info)
        resource_types = readable_resource_types(principal.scopes)
        if not resource_types:
            raise Forbidden(
                detail="These credentials read no events: the stream needs products:read, "
                "orders:read or users:read."
            )
        last_event_id = _last_event_id(scope)
        subscription = self._subscribe(scope, principal, resource_types, revocable(info))
        metrics.EVENT_STREAMS.inc()
        try:
            if last_event_id is None:  # from the newest event on, whatever the poller has read
                start = await self.streams.read(Event.latest_id)
            else:
                start = last_event_id
            # The poller offers this stream what comes after its head, which may be past `start`:
            # a new poller's first head is read after the stream's start, maybe after a write.
            catch_up_to = await self.streams.current_head()
            shape = self.event_shapes[version_of(scope)]
            stream = _Stream(send, principal, subscription, shape)
            await stream.run(self, start, catch_up_to, receive, deadline)
        finally:
            metrics.EVENT_STREAMS.dec()
            self.streams.unsubscribe(subscription)
        # Over, and counted so, while the end waits for a client that may read nothing more
        # (shopapi/pipeline/http_server.py cuts that one off).
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _subscribe(
        self, scope: Scope, principal: Principal, resource_types, revocable
    ) -> Subscription:
        try:
            return self.streams.subscribe(caller_of(scope), principal, resource_types, revocable)
        except StreamsFull as full:
            if full.per_client:
                metrics.RATE_LIMITED.labels(OPERATION_ID, "event_streams").inc()
                raise ProblemException(
                    status=429,
                    title="Too Many Requests",
                    detail=f"This client has {self.streams.max_per_client} event streams open "
                    "on this server, as many as it may: close one first.",
                    headers={"Retry-After": str(REFUSED_RETRY_AFTER)},
                ) from None
            raise ProblemException(
                status=503,
                title="Service Unavailable",
                detail="This server takes no more event streams now; try again later.",
                headers={"Retry-After": str(REFUSED_RETRY_AFTER)},
            ) from None


class _Stream:
    """One response: the events after where it starts, caught up from the database when the
    client resumes, then live ones, in id order, with a heartbeat while there are none."""

    def __init__(
        self, send: Send, principal: Principal, subscription: Subscription, shape: Shape | None
    ):
        self.send = send
        self.principal = principal
        self.subscription = subscription
        self.shape = shape  # the request's version's of an event

    async def run(
        self, layer: EventStreamMiddleware, start: int, catch_up_to: int, receive, deadline: float
    ) -> None:
        """Until the stream ends: its lifetime is over, or its subscription ended (revoked,
        disconnected, ...). The response's end is the caller's to send."""
        self.last = start
        watcher = asyncio.create_task(self._watch_disconnect(receive))
        try:
            await self.send({"type": "http.response.start", "status": 200, "headers": HEADERS})
            # The position first: a client that reconnects before any event resumes from it.
            await self._write(f"retry: {RETRY_MS}\nid: {self.last}\n\n".encode())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(deadline) as lifetime:
                    # An end cuts short what the stream waits for: a catch-up read, a write the
                    # client does not take.
                    self.subscription.on_end = functools.partial(_expire, lifetime)
                    if start < catch_up_to:
                        await self._catch_up(layer.streams, catch_up_to)
                    await self._live(layer.heartbeat_seconds)
        finally:
            self.subscription.on_end = None
            watcher.cancel()

    async def _watch_disconnect(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self.subscription.end("disconnected")

    async def _catch_up(self, streams: EventStreams, head: int) -> None:
        seen = Event.seen_by(self.principal, self.subscription.resource_types)
        up_to_head = seen.where(Event.id <= head)
        while self.subscription.ended is None:
            try:
                page = await streams.read(Event.after, self.last, BATCH, up_to_head)
            except peewee.PeeweeException as error:
                log.warning("event stream: catching up failed: %s", error)
                self.subscription.end("database")
                return
            await self._write(b"".join(self._message(event) for event in page))
            if len(page) < BATCH:
                return

    async def _live(self, heartbeat_seconds: float) -> None:
        subscription = self.subscription
        beat_at = time.monotonic() + heartbeat_seconds
        # Once ended, nothing more is written (a revoked caller's included): what was waiting,
        # the client reads after reconnecting.
        while subscription.ended is None:
            if subscription.waiting:
                waiting, subscription.waiting = subscription.waiting, type(subscription.waiting)()
                messages = b"".join(self._message(event) for event in waiting)
                if messages:
                    await self._write(messages)
                    beat_at = time.monotonic() + heartbeat_seconds
                continue
            now = time.monotonic()
            if now >= beat_at:
                await self._write(HEARTBEAT)
                beat_at = now + heartbeat_seconds
                continue
            subscription.wake.clear()
            # asyncio.timeout, not wait_for: Python 3.11's wait_for may swallow the lifetime's
            # cancellation when the wake comes at the same moment.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(beat_at - now):
                    await subscription.wake.wait()

    def _message(self, event: Event) -> bytes:
        if event.id <= self.last:  # caught up already, or before where the client resumed
            return b""
        self.last = event.id
        payload = event_payload(event, shows_actor=self.principal.is_admin)
        if self.shape is not None:
            payload = self.shape(payload)
        head = f"id: {event.id}\nevent: {event.type}\ndata: ".encode()
        return head + orjson.dumps(payload, option=OPTIONS) + b"\n\n"

    async def _write(self, body: bytes) -> None:
        if body:
            await self.send({"type": "http.response.body", "body": body, "more_body": True})


def _deadline(max_seconds: float, expires_at: float | None) -> float:
    """When the stream ends, in the loop's time: its lifetime runs from here (catching up, and
    writes the client is slow to take, count), and never past its credentials' expiry."""
    loop_now = asyncio.get_running_loop().time()
    deadline = loop_now + max_seconds
    if expires_at is not None:
        deadline = min(deadline, loop_now + expires_at - time.time())
    return deadline


def _expire(lifetime: asyncio.Timeout) -> None:
    if not lifetime.expired():
        lifetime.reschedule(asyncio.get_running_loop().time())


def _last_event_id(scope: Scope) -> int | None:
    """The Last-Event-ID header (validated against the contract: digits), if sent."""
    for name, value in scope["headers"]:
        if name == b"last-event-id":
            return int(value)
    return None
