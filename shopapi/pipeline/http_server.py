"""The HTTP/1.1 protocol `make serve` and ops/gunicorn.conf.py speak: uvicorn's httptools one,
with the limits on a request it lacks: its head's size and time (414, 431, 408), its body's time
(408) and the bodies a process receives at once (503), as problem+json, the connection closed;
and on how long a response waits for a client that reads nothing. Design: docs/pipeline.md."""

import asyncio
import functools
import gc
import http
import json
import socket
import struct
from collections.abc import Callable
from typing import ClassVar

import httptools
from uvicorn_worker import UvicornWorker as _UvicornWorker

from shopapi.internals import uvicorn as uvicorn_internals
from shopapi.internals.uvicorn import FlowControl, HttpToolsProtocol
from shopapi.pipeline import response_headers
from shopapi.settings import Settings

# As much as nginx buffers for a request's head by default (1 KiB + 4 x 8 KiB); h11's is 16 KiB.
MAX_HEAD_BYTES = 32 * 1024
# A list's filters can make a long URL; twice what nginx takes in one line by default (8 KiB).
MAX_TARGET_BYTES = 16 * 1024
# gunicorn's limit_request_fields.
MAX_HEADER_FIELDS = 100
# A request's head arrives in one or two packets; a client taking longer is holding a
# connection open (slowloris), not sending a request.
HEAD_TIMEOUT_SECONDS = 10.0
# Tracked objects alive beyond those at the last collection before the collector runs again
# (Python's default: 700); see _tune_the_collector.
YOUNGEST_COLLECTED_AFTER = 10_000
# Room is made as soon as a body has arrived, in milliseconds on a sound link; a slow client
# holds its room at most REQUEST_BODY_TIMEOUT_SECONDS.
BUSY_RETRY_AFTER_SECONDS = 1


class BoundedWrites(FlowControl):
    """uvicorn's flow control, whose wait for the client to take what the connection has
    buffered ends after `timeout` (as nginx's send_timeout): the connection is then reset, and
    the response sees its client gone."""

    def __init__(self, transport: asyncio.Transport, timeout: float):
        super().__init__(transport)
        self.timeout = timeout

    async def drain(self) -> None:
        try:
            async with asyncio.timeout(self.timeout):
                await self.writable.wait()
        except TimeoutError:
            # A reset, not a close: a close would wait, buffers and all, for the client to read.
            sock = self.transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.transport.abort()
            # connection_lost follows: it marks the client gone and lets writes go on, unsent.
            await self.writable.wait()


class _Refused(Exception):
    """The parser is stopped: the request was answered with this status."""


class _Parser:
    """httptools' parser, raising a refusal of ours as itself. httptools hands a callback's
    exception back wrapped in its own error, which uvicorn would log as an invalid request."""

    def __init__(self, parser: httptools.HttpRequestParser):
        self._parser = parser

    def feed_data(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as error:
            if isinstance(error.__context__, _Refused):
                raise error.__context__ from None
            raise

    def __getattr__(self, name: str):
        return getattr(self._parser, name)


class BodiesInFlight:
    """The bytes of request bodies a process is receiving, within `max_bytes`: each body takes
    room for its Content-Length when its head ends (a chunked one as it arrives), and gives it
    back when it has arrived, been answered, or its connection ended."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.taken = 0

    def take(self, size: int) -> bool:
        if self.taken + size > self.max_bytes:
            return False
        self.taken += size
        return True

    def give_back(self, size: int) -> None:
        self.taken -= size


@functools.cache
def _settings() -> Settings:
    # Read once a process, as the app reads them: the server builds its protocol apart from it.
    return Settings.from_env(warn_of_generated_secrets=False)


@functools.cache
def _bodies_in_flight() -> BodiesInFlight:
    return BodiesInFlight(_settings().request_bodies_in_flight_max_bytes)


@functools.cache
def _tune_the_collector() -> None:
    """Put what start-up built (each version's contract and its validators, the app, the
    modules) out of the cyclic collector's sight: it lives as long as the process, and a full
    collection then walks only what serving made, not all of it again. Once, at the first
    connection: the server accepts none before its lifespan has started the app up.

    And collect the youngest objects less often. Python's collector runs when 700 more objects
    are alive than when it last ran; a request keeps thousands alive while it runs (a list of 20
    and its rows, models, dicts), so it ran several times in each, walking live objects and
    moving them on to older generations, to be walked again there. Refcounting frees what a
    request leaves at its end; only cycles wait for the collector, which runs then at most
    once every YOUNGEST_COLLECTED_AFTER more live objects."""
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(YOUNGEST_COLLECTED_AFTER, middle, oldest)


class HttpProtocol(HttpToolsProtocol):
    max_head_bytes = MAX_HEAD_BYTES
    max_target_bytes = MAX_TARGET_BYTES
    max_header_fields = MAX_HEADER_FIELDS
    head_timeout = HEAD_TIMEOUT_SECONDS

    def connection_made(self, transport: asyncio.Transport) -> None:
        _tune_the_collector()
        super().connection_made(transport)
        self.parser = _Parser(self.parser)
        settings = _settings()
        self.flow = BoundedWrites(transport, settings.send_timeout_seconds)
        self.body_timeout = settings.request_body_timeout_seconds
        self.max_body_bytes = settings.max_body_bytes  # the app answers 413 beyond
        self.bodies_in_flight = _bodies_in_flight()
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._body_taken = 0  # of bodies_in_flight, by the body arriving
        self._body_chunked = False
        self._start_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        self._end_body()
        super().connection_lost(exc)

    def _start_head(self) -> None:
        self._reading_head = True
        self._head_bytes = 0  # received while the head was incomplete
        self._head_size = 0  # of the request line and the fields parsed so far
        self._header_fields = 0
        self._url_size = 0
        self._stop_head_timer()
        self._head_timer = self.loop.call_later(self.head_timeout, self._head_timed_out)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def data_received(self, data: bytes) -> None:
        try:
            super().data_received(data)
        except _Refused:  # the request was answered, the connection is closing
            return
        if self._reading_head and not self.transport.is_closing():
            # At most one read beyond the limit is ever held: the parser's buffers stay small.
            self._head_bytes += len(data)
            if self._head_bytes > self.max_head_bytes:
                self._refuse(431, "The request's header fields are too large.")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if not self._reading_head:  # the next request on a kept-alive connection
            self._start_head()

    def on_url(self, url: bytes) -> None:
        self._url_size += len(url)  # the target may come in several parts
        self._head_size += len(url)
        if self._url_size > self.max_target_bytes:
            self._refuse(414, "The request's target (path and query) is too long.")
            raise _Refused
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_fields += 1
        self._head_size += len(name) + len(value) + 4  # ": " and CRLF
        if self._header_fields > self.max_header_fields:
            self._refuse(431, "The request has too many header fields.")
            raise _Refused  # stops the parser: its error is not answered again
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._reading_head = False
        self._stop_head_timer()
        if self._head_size > self.max_head_bytes:  # a whole head in one read, but too large
            self._refuse(431, "The request's header fields are too large.")
            raise _Refused
        if self.parser.should_upgrade() and uvicorn_internals.should_upgrade(self):
            super().on_headers_complete()  # the connection is the WebSocket protocol's now
            return
        length, self._body_chunked = self._body_framing()
        # Beyond the app's limit a body is answered 413 unread: it never holds more.
        size = min(length, self.max_body_bytes)
        if not self.bodies_in_flight.take(size):
            # Refused before the app is called: it never sees the request. An earlier request's
            # answer may still be on its way (pipelining): then nothing may be written after it.
            if self.cycle is None or self.cycle.response_complete:
                self._refuse_busy()
            else:
                self._close()
            raise _Refused
        self._body_taken = size
        super().on_headers_complete()
        if length or self._body_chunked:
            self._body_timer = self.loop.call_later(self.body_timeout, self._body_timed_out)

    def _body_framing(self) -> tuple[int, bool]:
        """The body's Content-Length (0 if none), and whether it is chunked."""
        length, chunked = 0, False
        for name, value in self.headers:
            if name == b"content-length" and value.isdigit():  # httptools refuses any other
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = True
        return length, chunked

    def on_body(self, body: bytes) -> None:
        if self._body_chunked and not self.cycle.response_complete:
            if not self.bodies_in_flight.take(len(body)):
                self._give_up(self._refuse_busy)
                raise _Refused
            self._body_taken += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._end_body()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        if self.cycle is not None and self.cycle.response_complete:
            # Answered before its body arrived: uvicorn drops the rest as it comes.
            self._give_back_body()
        super().on_response_complete()

    def _give_back_body(self) -> None:
        self.bodies_in_flight.give_back(self._body_taken)
        self._body_taken = 0

    def _end_body(self) -> None:
        self._give_back_body()
        self._body_chunked = False
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_timed_out(self) -> None:
        self._body_timer = None
        # Answered as the app answers its errors: the app has taken the request (its id, its
        # version) but waits for a body it will not get.
        self._give_up(
            lambda: self._refuse(
                408, "The request's body took too long to arrive.", request=self.scope
            )
        )

    def _give_up(self, refuse: Callable[[], None]) -> None:
        """End the connection while a request's body arrives: answered by `refuse` unless an
        answer (this request's, or an earlier one's still in flight) may be on the wire already."""
        if self.transport.is_closing():
            return
        if self.cycle.response_started or self.pipeline:
            self._close()
        else:
            refuse()

    def _refuse_busy(self) -> None:
        self.logger.warning(
            "%d bytes of request bodies are arriving (REQUEST_BODIES_IN_FLIGHT_MAX_BYTES): "
            "one more refused",
            self.bodies_in_flight.taken,
        )
        self._refuse(
            503,
            "The server is receiving too many request bodies at once.",
            retry_after=BUSY_RETRY_AFTER_SECONDS,
        )

    def send_400_response(self, msg: str) -> None:
        if not self.transport.is_closing():  # not after a refusal of ours
            super().send_400_response(msg)

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._reading_head and not self.transport.is_closing():
            if self._head_bytes:
                self._refuse(408, "The request's head took too long to arrive.")
            else:
                self.transport.close()

    def _refuse(
        self,
        status: int,
        detail: str,
        retry_after: int | None = None,
        request: dict | None = None,
    ) -> None:
        """Answer `status` and close. `request`: the scope of a request the app has taken, whose
        answer then has what the app's errors have (`instance`, `request_id`, `API-Version`)."""
        title = http.HTTPStatus(status).phrase
        problem = {"type": "about:blank", "title": title, "status": status, "detail": detail}
        headers = self._default_headers()
        if request is not None:
            request_id = request.get("state", {}).get("request_id")
            problem |= {"instance": request["path"], "request_id": request_id}
            noted = [*response_headers.headers_for(request)]
            if request_id:
                noted.append(("X-Request-ID", request_id))
            headers += [(name.lower().encode(), value.encode()) for name, value in noted]
        body = json.dumps(problem).encode()
        self.transport.write(
            b"".join(
                [
                    uvicorn_internals.status_line(status),
                    *(name + b": " + value + b"\r\n" for name, value in headers),
                    b"content-type: application/problem+json\r\n",
                    b"content-length: %d\r\n" % len(body),
                    b"retry-after: %d\r\n" % retry_after if retry_after is not None else b"",
                    b"connection: close\r\n\r\n",
                    body,
                ]
            )
        )
        self._close()

    def _close(self) -> None:
        # At once, not when the transport reports it lost: the app's own answer must not be
        # written after ours, and its wait for the body ends with a disconnect.
        uvicorn_internals.end_cycle(self)
        self.transport.close()
        self._stop_head_timer()
        self._end_body()

    def _default_headers(self) -> list[tuple[bytes, bytes]]:
        return uvicorn_internals.default_headers(self)


class UvicornWorker(_UvicornWorker):
    """gunicorn's uvicorn worker, speaking HttpProtocol."""

    CONFIG_KWARGS: ClassVar[dict] = {**_UvicornWorker.CONFIG_KWARGS, "http": HttpProtocol}
