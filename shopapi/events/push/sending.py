"""One attempt of a push delivery: the device's platform picks the transport, and the answer,
read as each service defines it, becomes a verdict (docs/events.md, Push)."""

import base64
import dataclasses
import datetime
import email.utils
import logging
import re
import time

from models import Device
from shopapi.events.push import PushNotification
from shopapi.settings import Settings

log = logging.getLogger("shopapi.push")

# A Retry-After longer than this is taken as this: the delivery is retried, not parked for days.
MAX_RETRY_AFTER_SECONDS = 3600
_DELAY_SECONDS = re.compile("[0-9]+")


@dataclasses.dataclass(frozen=True)
class Outcome:
    """`delivered`, `retry`, `unregistered` (the token is no longer valid) or `failed`; the
    service's status (None when it gave none) and, but on delivery, why."""

    verdict: str
    status: int | None
    error: str | None
    duration_ms: int
    retry_after: float | None = None

    @property
    def recorded(self) -> dict:
        return {
            "duration_ms": self.duration_ms,
            "response_status": self.status,
            "error": self.error,
        }


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def since(started: float) -> int:
    return round((time.monotonic() - started) * 1000)


def no_answer(error: str, started: float) -> Outcome:
    """No answer (refused, timeout, connection lost): tried again."""
    return Outcome("retry", None, error, since(started))


def answered(
    status: int, retry_after: str | None, reason: str, unregistered: bool, started: float
) -> Outcome:
    """The verdict on a service's answer: 2xx delivered; a token the service says is invalid
    (`unregistered`) removes the device; 429 and 5xx are tried again, not before `Retry-After`;
    anything else fails the delivery, with the service's `reason`."""
    took = since(started)
    if 200 <= status < 300:
        return Outcome("delivered", status, None, took)
    if unregistered:
        return Outcome("unregistered", status, f"the token is no longer valid: {reason}", took)
    if status == 429 or status >= 500:
        return Outcome("retry", status, reason, took, _seconds(retry_after))
    return Outcome("failed", status, reason, took)


def _seconds(retry_after: str | None) -> float | None:
    """RFC 9110 10.2.3's Retry-After: delay-seconds (ASCII digits: `str.isdigit` also takes
    `²`, which `float` refuses), or an HTTP date; None when absent or unreadable."""
    if not retry_after:
        return None
    retry_after = retry_after.strip()
    if _DELAY_SECONDS.fullmatch(retry_after):
        return min(float(retry_after), MAX_RETRY_AFTER_SECONDS)
    try:
        when = email.utils.parsedate_to_datetime(retry_after)
        if when.tzinfo is None:
            # An HTTP date is GMT (RFC 9110 5.6.7); email.utils leaves `-0000` and a date
            # without a zone naive.
            when = when.replace(tzinfo=datetime.UTC)
        left = (when - datetime.datetime.now(datetime.UTC)).total_seconds()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return min(max(left, 0.0), MAX_RETRY_AFTER_SECONDS)


class Senders:
    """The transport of each platform (PUSH_TRANSPORT=send): those whose settings are given."""

    def __init__(self, settings: Settings):
        from shopapi.events.push import apns, fcm, webpush

        self._settings = settings
        self._by_platform = {}
        if settings.vapid_private_key:
            self._by_platform["webpush"] = webpush.WebPush(settings)
        if settings.fcm_service_account:
            self._by_platform["fcm"] = fcm.Fcm(settings)
        if settings.apns_key:
            self._by_platform["apns"] = apns.Apns(settings)

    def send(self, device: Device, notification: PushNotification) -> Outcome:
        sender = self._by_platform.get(device.platform)
        if sender is None:
            error = f"{device.platform} is not configured on this server (see its settings)"
            return Outcome("failed", None, error, 0)
        return sender.send(device, notification)


class LogSender:
    """PUSH_TRANSPORT=log: each notification a JSON line, in its device's shape, as delivered
    (development, and audits)."""

    def send(self, device: Device, notification: PushNotification) -> Outcome:
        shapes = {
            "fcm": lambda: notification.fcm_message("<token>"),
            "apns": notification.apns_payload,
            "webpush": notification.webpush_payload,
        }
        fields = {
            "user_id": notification.user_id,
            "device_id": device.id,
            "platform": device.platform,
            "message": shapes[device.platform](),
        }
        log.info("push notification", extra={"fields": fields})
        return Outcome("delivered", None, None, 0)


def senders(settings: Settings):
    """What sends push deliveries under PUSH_TRANSPORT (`none` makes none to send)."""
    return LogSender() if settings.push_transport == "log" else Senders(settings)
