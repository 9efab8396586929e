"""One POST of one event to one webhook, signed (Standard Webhooks), and what came of it.

The host name is resolved here and every address it resolves to must be public (unless
WEBHOOK_ALLOW_PRIVATE); the connection then goes to that vetted address, never to the name again,
so a name that resolves to a public address when checked and to a private one a moment later
(DNS rebinding) cannot turn the worker against its own network. TLS still checks the certificate
against the host name. Redirects are not followed: a 3xx is a failed attempt.
"""

import dataclasses
import http.client
import socket
import ssl
import time
from urllib.parse import urlsplit

import orjson

from models import Event, Webhook
from shopapi.event_payloads import event_payload
from shopapi.jsonifier import OPTIONS
from shopapi.settings import Settings
from shopapi.webhook_signatures import headers as signature_headers
from shopapi.webhook_targets import is_public, refusal

USER_AGENT = "shopapi-webhooks/1"


@dataclasses.dataclass(frozen=True)
class Outcome:
    """The receiver's status, or `error` when there was no answer (refused, timeout, ...)."""

    status: int | None
    error: str | None
    duration_ms: int

    @property
    def succeeded(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class Refused(Exception):
    """The target may not receive webhooks; no connection was made."""


def post(webhook: Webhook, event: Event, settings: Settings) -> Outcome:
    """POST `event` to `webhook` once."""
    body = orjson.dumps(event_payload(event, webhook.api_version), option=OPTIONS)
    started = time.monotonic()
    try:
        status = _send(webhook.url, _request_headers(webhook, event, body), body, settings)
        error = None
    except Refused as refused:
        status, error = None, f"refused: {refused}"
    except TimeoutError:
        status, error = None, f"no answer within {settings.webhook_timeout_seconds:g} s"
    except ssl.SSLError as tls_error:
        status, error = None, f"TLS failed: {tls_error}"
    except (OSError, http.client.HTTPException) as failure:
        status, error = None, f"connection failed: {failure or type(failure).__name__}"
    return Outcome(status, error, round((time.monotonic() - started) * 1000))


def _request_headers(webhook: Webhook, event: Event, body: bytes) -> dict[str, str]:
    # The event id is the message id, the same on every attempt: receivers drop duplicates by it.
    signed = signature_headers(webhook.secret, str(event.id), int(time.time()), body)
    return {"Content-Type": "application/json", "User-Agent": USER_AGENT, **signed}


def _send(url: str, headers: dict[str, str], body: bytes, settings: Settings) -> int:
    reason = refusal(url, settings.webhook_allow_private)
    if reason:
        raise Refused(f"the URL {reason}")
    parts = urlsplit(url)
    https = parts.scheme == "https"
    port = parts.port or (443 if https else 80)
    address = _vetted_address(parts.hostname, port, settings.webhook_allow_private)
    connection_class = _PinnedHTTPSConnection if https else _PinnedHTTPConnection
    connection = connection_class(parts.hostname, port, address, settings.webhook_timeout_seconds)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    try:
        connection.request("POST", path, body=body, headers=headers)
        return connection.getresponse().status
    finally:
        connection.close()


def _vetted_address(host: str, port: int, allow_private: bool) -> tuple:
    """Where to connect for `host`: (family, sockaddr) of its first address, once all of them are
    known to be public. One private address among public ones is refused too: which one a client
    gets is up to the resolver."""
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    if not allow_private:
        for *_, sockaddr in found:
            if not is_public(sockaddr[0]):
                raise Refused(
                    f"{host} resolves to {sockaddr[0]}, a private, loopback or reserved address"
                )
    family, _, _, _, sockaddr = found[0]
    return family, sockaddr


def _connect(address: tuple, timeout: float) -> socket.socket:
    family, sockaddr = address
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(sockaddr)
    except BaseException:
        sock.close()
        raise
    return sock


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Sends `Host: host` but connects to `address`, resolved and vetted beforehand."""

    def __init__(self, host: str, port: int, address: tuple, timeout: float):
        super().__init__(host, port, timeout=timeout)
        self._address = address

    def connect(self):
        self.sock = _connect(self._address, self.timeout)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """As _PinnedHTTPConnection, with TLS for `host` (SNI and the certificate's name)."""

    def __init__(self, host: str, port: int, address: tuple, timeout: float):
        self._tls = ssl.create_default_context()
        super().__init__(host, port, timeout=timeout, context=self._tls)
        self._address = address

    def connect(self):
        self.sock = self._tls.wrap_socket(
            _connect(self._address, self.timeout), server_hostname=self.host
        )
