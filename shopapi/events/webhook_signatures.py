"""Standard Webhooks signatures (https://www.standardwebhooks.com/): `whsec_` secrets and the
`webhook-id`, `webhook-timestamp` and `webhook-signature` headers (see docs/events.md)."""

import base64
import hashlib
import hmac
import secrets

_PREFIX = "whsec_"


def new_secret() -> str:
    return _PREFIX + base64.b64encode(secrets.token_bytes(24)).decode()


def signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` header value of `body` sent as `message_id` at `timestamp`."""
    key = base64.b64decode(secret.removeprefix(_PREFIX))
    signed = f"{message_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def headers(secret: str, message_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(secret, message_id, timestamp, body),
    }
