"""One HTTP POST to a URL a client gave (a webhook, a Web Push endpoint): to a vetted public
address, within one deadline for all of it, no redirects (docs/events.md tells why).
"""

import dataclasses
import http.client
import queue
import socket
import ssl
import threading
import time
from email.message import Message
from urllib.parse import urlsplit

from shopapi.events.webhook_targets import address_refusal, refusal

# What is read of an answer's body, at most (a reason to record, not a document).
BODY_LIMIT = 4096


@dataclasses.dataclass(frozen=True)
class Answer:
    status: int
    headers: Message
    body: bytes  # its first BODY_LIMIT bytes, when read


@dataclasses.dataclass(frozen=True)
class Attempt:
    """The receiver's answer, or `error` when there was none (refused, timeout, ...)."""

    answer: Answer | None
    error: str | None
    duration_ms: int


class Refused(Exception):
    """The target may not receive requests; no connection was made."""


def attempt(
    url: str,
    headers: dict[str, str],
    body: bytes,
    *,
    allow_private: bool,
    timeout: float,
    read_body: bool = False,
) -> Attempt:
    """POST `body` to `url` once, within `timeout` seconds all told; with `read_body`, the
    answer's body is read too (up to BODY_LIMIT bytes, within the same deadline)."""
    started = time.monotonic()
    deadline = started + timeout
    answer, error = None, None
    try:
        answer = _send(url, headers, body, allow_private, deadline, read_body)
    except Refused as refused:
        error = f"refused: {refused}"
    except TimeoutError:
        error = f"no answer within {timeout:g} s"
    except ssl.SSLError as tls_error:
        error = f"TLS failed: {tls_error}"
    except (OSError, http.client.HTTPException) as failure:
        error = f"connection failed: {failure or type(failure).__name__}"
    return Attempt(answer, error, round((time.monotonic() - started) * 1000))


def _send(
    url: str,
    headers: dict[str, str],
    body: bytes,
    allow_private: bool,
    deadline: float,
    read_body: bool,
) -> Answer:
    reason = refusal(url, allow_private)
    if reason:
        raise Refused(f"the URL {reason}")
    parts = urlsplit(url)
    https = parts.scheme == "https"
    port = parts.port or (443 if https else 80)
    address = _vetted_address(parts.hostname, port, allow_private, deadline)
    connection_class = _PinnedHTTPSConnection if https else _PinnedHTTPConnection
    connection = connection_class(parts.hostname, port, address, deadline)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    try:
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        content = response.read(BODY_LIMIT) if read_body else b""
        return Answer(response.status, response.msg, content)
    finally:
        connection.close()


def _time_left(deadline: float) -> float:
    """Seconds until `deadline`; TimeoutError once it has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the attempt's deadline passed")
    return left


def _vetted_address(host: str, port: int, allow_private: bool, deadline: float) -> tuple:
    """Where to connect for `host`: (family, sockaddr) of its first address, once all of them are
    known to be public. One private address among public ones is refused too: which one a client
    gets is up to the resolver."""
    found = _resolve(host, port, deadline)
    if not allow_private:
        for *_, sockaddr in found:
            reason = address_refusal(sockaddr[0])
            if reason:
                raise Refused(f"{host} resolves to {sockaddr[0]}, {reason}")
    family, _, _, _, sockaddr = found[0]
    return family, sockaddr


def _resolve(host: str, port: int, deadline: float) -> list:
    """getaddrinfo within the deadline. The resolver cannot be interrupted, so it runs in a
    thread of its own, left to finish by itself if the deadline passes first."""
    answers = queue.SimpleQueue()

    def resolve():
        try:
            answers.put(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except BaseException as error:  # handed to the attempt, which raises it
            answers.put(error)

    threading.Thread(target=resolve, name="webhook-resolve", daemon=True).start()
    try:
        found = answers.get(timeout=_time_left(deadline))
    except queue.Empty:
        raise TimeoutError(f"resolving {host} took past the attempt's deadline") from None
    if isinstance(found, BaseException):
        raise found
    return found


class _Deadline:
    """A socket whose every operation waits only for the time left until `deadline`."""

    deadline: float

    def _arm(self) -> None:
        self.settimeout(_time_left(self.deadline))

    def connect(self, *args):
        self._arm()
        return super().connect(*args)

    def do_handshake(self, *args):
        self._arm()
        return super().do_handshake(*args)

    def send(self, *args):
        self._arm()
        return super().send(*args)

    def sendall(self, *args):
        self._arm()
        return super().sendall(*args)

    def recv(self, *args):
        self._arm()
        return super().recv(*args)

    def recv_into(self, *args):
        # What http.client's reads (socket.makefile) come down to, a buffer at a time.
        self._arm()
        return super().recv_into(*args)


class _DeadlineSocket(_Deadline, socket.socket):
    pass


class _DeadlineSSLSocket(_Deadline, ssl.SSLSocket):
    pass


def _connect(address: tuple, deadline: float) -> _DeadlineSocket:
    family, sockaddr = address
    sock = _DeadlineSocket(family, socket.SOCK_STREAM)
    sock.deadline = deadline
    try:
        sock.connect(sockaddr)
    except BaseException:
        sock.close()
        raise
    return sock


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Sends `Host: host` but connects to `address`, resolved and vetted beforehand; every
    socket operation within `deadline`."""

    def __init__(self, host: str, port: int, address: tuple, deadline: float):
        super().__init__(host, port)
        self._address = address
        self._deadline = deadline

    def connect(self):
        self.sock = _connect(self._address, self._deadline)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """As _PinnedHTTPConnection, with TLS for `host` (SNI and the certificate's name)."""

    def __init__(self, host: str, port: int, address: tuple, deadline: float):
        self._tls = ssl.create_default_context()
        self._tls.sslsocket_class = _DeadlineSSLSocket
        super().__init__(host, port, context=self._tls)
        self._address = address
        self._deadline = deadline

    def connect(self):
        plain = _connect(self._address, self._deadline)
        try:
            tls = self._tls.wrap_socket(
                plain, server_hostname=self.host, do_handshake_on_connect=False
            )
        except BaseException:
            plain.close()
            raise
        tls.deadline = self._deadline
        self.sock = tls  # closed with the connection, whatever the handshake does
        tls.do_handshake()
