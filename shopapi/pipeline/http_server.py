"""The HTTP/1.1 protocol `make serve` and ops/gunicorn.conf.py speak: uvicorn's httptools one,
with the limits it lacks: on a request's head (414, 431 and 408, as problem+json, the connection
closed), and on how long a response waits for a client that reads nothing. Design:
docs/pipeline.md."""

import asyncio
import functools
import http
import json
import socket
import struct
from typing import ClassVar

from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn_worker import UvicornWorker as _UvicornWorker

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


@functools.cache  # the process's environment, read once, as create_app reads it
def send_timeout() -> float:
    return Settings.from_env(warn_of_generated_secrets=False).send_timeout_seconds


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
                await self._is_writable_event.wait()
        except TimeoutError:
            # A reset, not a close: a close would wait, buffers and all, for the client to read.
            sock = self._transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self._transport.abort()
            # connection_lost follows: it marks the client gone and lets writes go on, unsent.
            await self._is_writable_event.wait()


class _Refused(Exception):
    """The parser is stopped: the request was answered with this status."""


class HttpProtocol(HttpToolsProtocol):
    max_head_bytes = MAX_HEAD_BYTES
    max_target_bytes = MAX_TARGET_BYTES
    max_header_fields = MAX_HEADER_FIELDS
    head_timeout = HEAD_TIMEOUT_SECONDS

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)
        self.flow = BoundedWrites(transport, send_timeout())
        self._head_timer: asyncio.TimerHandle | None = None
        self._start_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
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
        except _Refused:  # if the parser hands back our own exception rather than its error
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
        super().on_headers_complete()

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

    def _refuse(self, status: int, detail: str) -> None:
        title = http.HTTPStatus(status).phrase
        problem = {"type": "about:blank", "title": title, "status": status, "detail": detail}
        body = json.dumps(problem).encode()
        self.transport.write(
            b"".join(
                [
                    STATUS_LINE[status],
                    *(name + b": " + value + b"\r\n" for name, value in self._default_headers()),
                    b"content-type: application/problem+json\r\n",
                    b"content-length: %d\r\n" % len(body),
                    b"connection: close\r\n\r\n",
                    body,
                ]
            )
        )
        self.transport.close()
        self._stop_head_timer()

    def _default_headers(self) -> list[tuple[bytes, bytes]]:
        return list(getattr(self.server_state, "default_headers", []))


class UvicornWorker(_UvicornWorker):
    """gunicorn's uvicorn worker, speaking HttpProtocol."""

    CONFIG_KWARGS: ClassVar[dict] = {**_UvicornWorker.CONFIG_KWARGS, "http": HttpProtocol}
