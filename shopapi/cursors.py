"""Opaque list cursors: where a walk through a list stopped, signed (HMAC-SHA256) so a client
can neither forge nor alter one, and bound to the filters and sort it was made for."""

import base64
import hashlib
import hmac
import json

_VERSION = 1


class CursorError(ValueError):
    """The cursor was not issued by this service, or not for this list."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(payload: bytes, secret: bytes) -> bytes:
    return hmac.new(secret, payload, hashlib.sha256).digest()[:16]


def binding_of(*parts) -> str:
    """A short digest of what a cursor is valid for (path, filters, sort)."""
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:24]


def issue(position: list, binding: str, secret: bytes) -> str:
    payload = json.dumps([_VERSION, binding, position], separators=(",", ":")).encode()
    return f"{_b64(payload)}.{_b64(_mac(payload, secret))}"


def read(token: str, binding: str, secret: bytes) -> list:
    """The position stored in `token`; CursorError when it is not a valid cursor for `binding`."""
    try:
        payload_text, mac_text = token.split(".")
        payload, mac = _unb64(payload_text), _unb64(mac_text)
    except ValueError:
        raise CursorError("is not a cursor this service issued") from None
    if not hmac.compare_digest(mac, _mac(payload, secret)):
        raise CursorError("is not a cursor this service issued")
    version, bound_to, position = json.loads(payload)
    if version != _VERSION:
        raise CursorError("has expired: start the list again")
    if bound_to != binding:
        raise CursorError("was made for other filters or another sort")
    return position
