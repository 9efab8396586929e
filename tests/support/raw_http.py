"""HTTP/1.1 spoken by hand over a socket, for what no client library sends: a body that trickles
in, or that stops half-way."""

import contextlib
import json
import select
import socket
import time
from collections.abc import Iterable

# How long a server may take to answer or close before a test fails: generous, for a busy machine.
ANSWER_DEADLINE_SECONDS = 60


def connect(base: str, source: str | None = None) -> socket.socket:
    """A connection to the server at `base` (http://host:port), from the address `source` if
    given (any of 127.0.0.0/8 is this machine's)."""
    host, port = base.removeprefix("http://").split(":")
    return socket.create_connection(
        (host, int(port)),
        timeout=ANSWER_DEADLINE_SECONDS,
        source_address=(source, 0) if source else None,
    )


def post_head(path: str, content_type: bytes, *headers: bytes, length: int | None = None) -> bytes:
    """A POST's head: with a Content-Length of `length`, or chunked when `length` is None."""
    framing = b"Transfer-Encoding: chunked" if length is None else b"Content-Length: %d" % length
    fields = [b"Host: shop", b"Content-Type: " + content_type, framing, *headers]
    lines = [b"POST " + path.encode() + b" HTTP/1.1", *fields]
    return b"".join(line + b"\r\n" for line in lines) + b"\r\n"


def trickle(connection: socket.socket, pieces: Iterable[bytes], every: float = 0.5) -> bytes:
    """Send one of `pieces` every `every` seconds until the server closes the connection;
    everything it sent. Fails when it neither closes nor stops reading in the deadline."""
    pieces = iter(pieces)
    received = b""
    deadline = time.monotonic() + ANSWER_DEADLINE_SECONDS
    while time.monotonic() < deadline:
        readable, _, _ = select.select([connection], [], [], every)
        if readable:
            try:
                chunk = connection.recv(65536)
            except ConnectionError:
                return received
            if not chunk:
                return received
            received += chunk
            continue
        piece = next(pieces, None)
        if piece is not None:
            with contextlib.suppress(ConnectionError):  # answered and closed meanwhile
                connection.sendall(piece)
    raise AssertionError(f"not closed in {ANSWER_DEADLINE_SECONDS} s; received {received[:300]!r}")


def read_response(connection: socket.socket) -> bytes:
    """One whole response with a Content-Length, read from `connection`."""
    return read_response_from(connection, b"")


def read_response_from(connection: socket.socket, received: bytes) -> bytes:
    """One whole response with a Content-Length, of which `received` has come already."""
    while b"\r\n\r\n" not in received:
        chunk = connection.recv(65536)
        assert chunk, f"closed before a whole head: {received!r}"
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    length = int(parse(head + b"\r\n\r\n")[1]["content-length"])
    while len(body) < length:
        chunk = connection.recv(65536)
        assert chunk, f"closed before a whole body: {received!r}"
        body += chunk
    return head + b"\r\n\r\n" + body


def read_response_or_continue(connection: socket.socket) -> bytes:
    """The answer to a head sent with `Expect: 100-continue`: `100 Continue` alone, or a whole
    response."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = connection.recv(65536)
        assert chunk, f"closed before a whole head: {received!r}"
        received += chunk
    if received.startswith(b"HTTP/1.1 100 "):
        return received
    return read_response_from(connection, received)


def parse(response: bytes) -> tuple[bytes, dict[str, str], bytes]:
    """A response's status line, its headers (names in lower case) and its body."""
    head, _, body = response.partition(b"\r\n\r\n")
    status, *fields = head.decode("latin-1").split("\r\n")
    headers = {}
    for field in fields:
        name, _, value = field.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status.encode(), headers, body


def problem_of(response: bytes, status: int) -> dict:
    """The problem document of a `status` answer that closes the connection, as the server's own
    protocol writes it (shopapi/pipeline/http_server.py)."""
    status_line, headers, body = parse(response)
    assert status_line.startswith(b"HTTP/1.1 %d " % status), response[:300]
    assert headers["content-type"] == "application/problem+json"
    assert headers["connection"] == "close"
    problem = json.loads(body)
    assert problem["status"] == status
    assert problem["type"] == "about:blank"
    return problem
