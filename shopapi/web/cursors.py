"""Opaque list cursors: where a walk through a list stopped, signed by itsdangerous (HMAC-SHA256)
so a client can neither forge nor alter one, and bound to the filters and sort it was made for."""

import hashlib
import json

from itsdangerous import BadData, Signer, base64_decode, base64_encode

_VERSION = 1
# itsdangerous derives its signing key from the secret and this: a key that signs cursors only.
_SALT = "shopapi.cursor"


class CursorError(ValueError):
    """The cursor was not issued by this service, or not for this list."""


def _signer(secret: bytes) -> Signer:
    return Signer(secret, salt=_SALT, digest_method=hashlib.sha256)


def binding_of(*parts) -> str:
    """A short digest of what a cursor is valid for (path, filters, sort)."""
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:24]


def issue(position: list, binding: str, secret: bytes) -> str:
    payload = json.dumps([_VERSION, binding, position], separators=(",", ":"))
    return _signer(secret).sign(base64_encode(payload)).decode()


def read(token: str, binding: str, secret: bytes) -> list:
    """The position stored in `token`; CursorError when it is not a valid cursor for `binding`."""
    try:
        payload = base64_decode(_signer(secret).unsign(token))
    except BadData:
        raise CursorError("is not a cursor this service issued") from None
    version, bound_to, position = json.loads(payload)
    if version != _VERSION:
        raise CursorError("has expired: start the list again")
    if bound_to != binding:
        raise CursorError("was made for other filters or another sort")
    return position
