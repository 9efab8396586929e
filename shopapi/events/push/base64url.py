"""Base64url without padding (RFC 4648 5), as Web Push writes its keys and VAPID its tokens
(RFC 8291, RFC 8292): read by the transport, and by the devices handler checking a key."""

import base64


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
