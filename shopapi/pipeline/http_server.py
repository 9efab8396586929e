"""The HTTP/1.1 protocol `make serve` and ops/gunicorn.conf.py speak: uvicorn's httptools one,
with the limits on a request it lacks: its head's size and time (414, 431, 408), its body's time
and rate (408) and the bodies a process and each client hold at once (503, 429), as problem+json,
the connection closed; and on how long a response waits for a client that reads nothing. Design:
docs/pipeline.md."""

import asyncio
import functools
import gc
import hashlib
import http
import json
import socket
import struct
from collections.abc import Callable
from typing import ClassVar

import httptools
from gunicorn import sock as gunicorn_sockets
from uvicorn_worker import UvicornWorker as _UvicornWorker

from shopapi.internals import uvicorn as uvicorn_internals
from shopapi.internals.uvicorn import FlowControl, HttpToolsProtocol
from shopapi.pipeline import response_headers
from shopapi.pipeline.address_groups import address_group
from shopapi.pipeline.forwarded import TrustedProxies
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
# How often an arriving body's rate is judged (once its grace is over).
RATE_CHECK_SECONDS = 1.0
# The request headers that tell a client apart from others at its address: its credentials.
_CREDENTIALS = (b"authorization", b"x-api-key")


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
    """The bytes of request bodies a process holds while they arrive, within `max_bytes` in all
    and `per_client` for each client (its address group, its credentials): each body takes room
    for its bytes as they come, and gives it back when it has arrived, been answered, or its
    connection ended. Room is taken for what came, not for what a head announces: a client
    announcing bodies it does not send holds nothing."""

    def __init__(self, max_bytes: int, per_client: int):
        self.max_bytes = max_bytes
        self.per_client = per_client
        self.taken = 0
        self._taken_by: dict[str, int] = {}  # only the clients holding some

    def refusal(self, size: int, clients: tuple[str, ...]) -> int | None:
        """The status refusing `size` more bytes of `clients`: 503 when the process has no room,
        429 when one of them has used its share; None when there is room."""
        if self.taken + size > self.max_bytes:
            return 503
        if any(self._taken_by.get(client, 0) + size > self.per_client for client in clients):
            return 429
        return None

    def take(self, size: int, clients: tuple[str, ...]) -> int | None:
        """Room for `size` bytes of `clients`, or the refusal's status (nothing taken)."""
        refused = self.refusal(size, clients)
        if refused is None:
            self.taken += size
            for client in clients:
                self._taken_by[client] = self._taken_by.get(client, 0) + size
        return refused

    def give_back(self, size: int, clients: tuple[str, ...]) -> None:
        self.taken -= size
        for client in clients:
            left = self._taken_by[client] - size
            if left:
                self._taken_by[client] = left
            else:
                del self._taken_by[client]


@functools.cache
def _settings() -> Settings:
    # Read once a process, as the app reads them: the server builds its protocol apart from it.
    return Settings.from_env(warn_of_generated_secrets=False)


@functools.cache
def _bodies_in_flight() -> BodiesInFlight:
    settings = _settings()
    return BodiesInFlight(
        settings.request_bodies_in_flight_max_bytes, settings.request_bodies_per_client_max_bytes
    )


@functools.cache
def _trusted_proxies() -> TrustedProxies:
    return TrustedProxies(_settings().forwarded_allow_ips)


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
        self.body_min_rate = settings.request_body_min_bytes_per_second
        self.body_grace = settings.request_body_grace_seconds
        self.bodies_in_flight = _bodies_in_flight()
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._rate_timer: asyncio.TimerHandle | None = None
        # Whose the arriving body is (None: no body arriving), and what it holds of the room.
        self._body_clients: tuple[str, ...] | None = None
        self._body_taken = 0
        self._body_received = 0
        self._body_seconds = 0.0  # its time so far, but for the app's (_rate_checked)
        self._body_checked_at = 0.0
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
        if not self._has_body():
            super().on_headers_complete()
            return
        clients = self._clients()
        refused = self.bodies_in_flight.refusal(1, clients)
        if refused is not None:
            # Refused before the app is called: it never sees the request. An earlier request's
            # answer may still be on its way (pipelining): then nothing may be written after it.
            if self.cycle is None or self.cycle.response_complete:
                self._refuse_busy(refused)
            else:
                self._close()
            raise _Refused
        super().on_headers_complete()
        self._body_clients = clients
        self._body_received = 0
        self._body_seconds = 0.0
        self._body_checked_at = self.loop.time()
        self._body_timer = self.loop.call_later(self.body_timeout, self._body_timed_out)
        if self.body_min_rate:
            self._rate_timer = self.loop.call_later(RATE_CHECK_SECONDS, self._rate_checked)

    def _has_body(self) -> bool:
        """Whether the request's head announces a body: chunks, or a Content-Length above 0."""
        for name, value in self.headers:
            if name == b"transfer-encoding":
                return True
            # httptools refuses a Content-Length that is not digits.
            if name == b"content-length" and value.isdigit() and int(value):
                return True
        return False

    def _clients(self) -> tuple[str, ...]:
        """Whom the arriving body counts against: its address group (the forwarded client's
        behind a proxy FORWARDED_ALLOW_IPS names), and its credentials if it presents some,
        whatever they are (a digest of the header: neither checked nor kept)."""
        peer = self.client[0] if self.client else "unknown"
        forwarded_for = b",".join(v for name, v in self.headers if name == b"x-forwarded-for")
        forwarded = _trusted_proxies().client(peer, forwarded_for.decode("latin-1"))
        clients = [address_group(forwarded or peer)]
        for name, value in self.headers:
            if name in _CREDENTIALS:
                clients.append(hashlib.blake2b(value, digest_size=16).hexdigest())
        return tuple(clients)

    def on_body(self, body: bytes) -> None:
        self._body_received += len(body)
        if self._body_clients is not None and not self.cycle.response_complete:
            refused = self.bodies_in_flight.take(len(body), self._body_clients)
            if refused is not None:
                self._give_up(functools.partial(self._refuse_busy, refused))
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
        if self._body_taken:
            self.bodies_in_flight.give_back(self._body_taken, self._body_clients)
            self._body_taken = 0

    def _end_body(self) -> None:
        self._give_back_body()
        self._body_clients = None
        for timer in (self._body_timer, self._rate_timer):
            if timer is not None:
                timer.cancel()
        self._body_timer = self._rate_timer = None

    def _body_timed_out(self) -> None:
        self._body_timer = None
        # Answered as the app answers its errors: the app has taken the request (its id, its
        # version) but waits for a body it will not get.
        self._give_up(
            lambda: self._refuse(
                408, "The request's body took too long to arrive.", request=self.scope
            )
        )

    def _rate_checked(self) -> None:
        """Judge the arriving body's rate once its grace is over: on average at least
        REQUEST_BODY_MIN_BYTES_PER_SECOND, or 408 (Kestrel's MinRequestBodyDataRate). What the
        app makes it wait does not count: reading paused, or its `100 Continue` not yet sent."""
        now = self.loop.time()
        if not uvicorn_internals.waits_for_the_app(self):
            self._body_seconds += now - self._body_checked_at
        self._body_checked_at = now
        seconds, rate = self._body_seconds, self.body_min_rate
        if seconds >= self.body_grace and self._body_received < rate * seconds:
            self._rate_timer = None
            detail = f"The request's body arrives slower than {rate} bytes a second."
            self._give_up(lambda: self._refuse(408, detail))
            return
        self._rate_timer = self.loop.call_later(RATE_CHECK_SECONDS, self._rate_checked)

    def _give_up(self, refuse: Callable[[], None]) -> None:
        """End the connection while a request's body arrives: answered by `refuse` unless an
        answer (this request's, or an earlier one's still in flight) may be on the wire already."""
        if self.transport.is_closing():
            return
        if self.cycle.response_started or self.pipeline:
            self._close()
        else:
            refuse()

    def _refuse_busy(self, status: int) -> None:
        if status == 429:
            detail = "This client is sending too many request bodies at once."
        else:
            detail = "The server is receiving too many request bodies at once."
            self.logger.warning(
                "%d bytes of request bodies are arriving (REQUEST_BODIES_IN_FLIGHT_MAX_BYTES): "
                "one more refused",
                self.bodies_in_flight.taken,
            )
        self._refuse(status, detail, retry_after=BUSY_RETRY_AFTER_SECONDS)

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


def worker_sockets(conf, log) -> list:
    """The sockets of a gunicorn worker with `reuse_port`, in the place of gunicorn's
    `create_sockets`, which opens them listening just after the fork (ops/gunicorn.conf.py puts
    this there): each TCP address bound beside the other workers' (SO_REUSEPORT) but not
    listening, so that the kernel queues no connection for the worker until its server listens,
    once it serves. A Unix socket is not shared: gunicorn's own, as before."""
    return [
        _bound(address)
        if isinstance(address, tuple)
        else gunicorn_sockets.UnixSocket(address, conf, log)
        for address in conf.address
    ]


def _bound(address: tuple[str, int]) -> socket.socket:
    host, port = address
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn's own
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.setblocking(False)
    return sock


class UvicornWorker(_UvicornWorker):
    """gunicorn's uvicorn worker, speaking HttpProtocol. With gunicorn's `reuse_port`, each
    worker listens on sockets of its own, which the kernel gives connections to evenly: bound at
    the fork (worker_sockets), listened on by uvicorn's server once its lifespan has started (as
    uvicorn alone listens), the app loaded and the drain in place (pipeline/draining.py). A
    socket that listened sooner was given connections it could not answer yet, and reset them
    when a SIGTERM stopped the worker as it started."""

    CONFIG_KWARGS: ClassVar[dict] = {**_UvicornWorker.CONFIG_KWARGS, "http": HttpProtocol}

    def run(self) -> None:
        if self.cfg.reuse_port:
            # The master's line names no socket: it holds the ports but listens on none.
            bound = ",".join(_url(listener) for listener in self.sockets)
            self.log.info("Listening at: %s (%s)", bound, self.pid)
        return super().run()


def _url(sock) -> str:
    if isinstance(sock, gunicorn_sockets.UnixSocket):
        return str(sock)
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if sock.family == socket.AF_INET6 else f"http://{host}:{port}"
