"""Web Push: RFC 8030 delivery to the subscription's endpoint, the payload encrypted per
RFC 8291 (aes128gcm, http_ece), authorised by RFC 8292 VAPID (an ES256 JWT and our key)."""

import os
import time
from urllib.parse import urlsplit

import http_ece
import orjson
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from jose import jwt

from models import Device
from shopapi.events import outbound
from shopapi.events.push import PushNotification
from shopapi.events.push.base64url import b64url, b64url_decode
from shopapi.events.push.endpoints import EndpointRule
from shopapi.events.push.outcomes import Outcome, answered, no_answer
from shopapi.settings import Settings

# How long the push service keeps a message for a device that is offline (RFC 8030 5.2).
TTL_SECONDS = 24 * 3600
# A VAPID token's life: RFC 8292 allows at most 24 hours.
TOKEN_SECONDS = 12 * 3600


def public_key(private_pem: str) -> str:
    """The VAPID public key as browsers take it (`applicationServerKey`): the uncompressed
    P-256 point, base64url."""
    key = serialization.load_pem_private_key(private_pem.encode(), password=None)
    point = key.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    return b64url(point)


def encrypt(payload: bytes, p256dh: str, auth: str) -> bytes:
    """`payload` for the subscription's keys (RFC 8291): a fresh sender key pair and salt each
    time, the sender's public key in the aes128gcm header."""
    return http_ece.encrypt(
        payload,
        salt=os.urandom(16),
        private_key=ec.generate_private_key(ec.SECP256R1()),
        dh=b64url_decode(p256dh),
        auth_secret=b64url_decode(auth),
        version="aes128gcm",
    )


class WebPush:
    def __init__(self, settings: Settings):
        self._pem = settings.vapid_private_key
        self._public = public_key(self._pem)
        self._subject = settings.vapid_subject
        self._allow_private = settings.webpush_allow_private
        self._endpoints = EndpointRule.of(settings)
        self._timeout = settings.delivery_timeout_seconds

    def _authorization(self, endpoint: str) -> str:
        parts = urlsplit(endpoint)
        claims = {
            "aud": f"{parts.scheme}://{parts.netloc}",
            "exp": int(time.time()) + TOKEN_SECONDS,
            "sub": self._subject,
        }
        token = jwt.encode(claims, self._pem, algorithm="ES256", headers={"typ": "JWT"})
        return f"vapid t={token}, k={self._public}"

    def send(self, device: Device, notification: PushNotification) -> Outcome:
        # Registered before the rule, or a setting, changed: not sent.
        refusal = self._endpoints.refusal(device.token)
        if refusal is not None:
            return Outcome("failed", None, f"not sent: the endpoint {refusal}", 0)
        started = time.monotonic()
        payload = orjson.dumps(notification.webpush_payload())
        headers = {
            "Authorization": self._authorization(device.token),
            "TTL": str(TTL_SECONDS),
            "Content-Encoding": "aes128gcm",
            "Content-Type": "application/octet-stream",
            "Urgency": "normal",
            # RFC 8030 5.4: a newer message of the same topic replaces one still queued.
            "Topic": notification.collapse_key[:32],
        }
        body = encrypt(payload, device.p256dh, device.auth)
        sent = outbound.attempt(
            device.token,
            headers,
            body,
            allow_private=self._allow_private,
            timeout=self._timeout,
            read_body=True,
        )
        if sent.answer is None:
            return no_answer(sent.error, started)
        status = sent.answer.status
        reason = f"{status} {sent.answer.body[:200].decode(errors='replace')}".strip()
        return answered(
            status,
            sent.answer.headers.get("Retry-After"),
            reason,
            unregistered=status in (404, 410),
            started=started,
        )
