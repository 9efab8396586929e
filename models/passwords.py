"""Password hashing with scrypt (RFC 7914): slow, salted, memory-hard, in the standard library."""

import base64
import hashlib
import hmac
import secrets

# 16 MiB and ~50 ms per hash on this hardware: costly to guess offline, cheap enough per login.
_N, _R, _P, _LENGTH = 2**14, 8, 1, 32


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(
        password.encode("utf-8"), salt=salt, n=n, r=r, p=p, dklen=_LENGTH, maxmem=64 * 1024 * 1024
    )


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = _scrypt(password, salt, _N, _R, _P)
    encode = base64.b64encode
    return f"scrypt${_N}${_R}${_P}${encode(salt).decode()}${encode(digest).decode()}"


def verify_password(password: str, stored: str) -> bool:
    """True when `password` matches `stored`; compares in constant time."""
    try:
        _, n, r, p, salt, digest = stored.split("$")
        expected = base64.b64decode(digest)
        actual = _scrypt(password, base64.b64decode(salt), int(n), int(r), int(p))
    except ValueError:
        return False
    return hmac.compare_digest(actual, expected)


# The hash of no one's password: checked when a login names an unknown email, so that the answer
# takes as long as for a wrong password and timing does not tell which emails exist.
_NOBODY = "scrypt$16384$8$1$pi+DJGcYn/pa/eTEcGnIpA==$FfesN4gkAErk6mi0+TJn3dwhkqYitRhW42NISro0HbE="


def verify_login(password: str, stored: str | None) -> bool:
    """verify_password, at the same cost when there is no stored hash (and then False)."""
    matches = verify_password(password, stored or _NOBODY)
    return matches and stored is not None
