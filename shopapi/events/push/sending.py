"""The transport of a push delivery: the device's platform picks it, under PUSH_TRANSPORT
(docs/events.md, Push). What each transport's answer comes to: push/outcomes.py."""

import logging

from models import Device
from shopapi.events.push import PushNotification, apns, fcm, webpush
from shopapi.events.push.outcomes import Outcome
from shopapi.settings import Settings

log = logging.getLogger("shopapi.push")


class Senders:
    """The transport of each platform (PUSH_TRANSPORT=send): those whose settings are given."""

    def __init__(self, settings: Settings):
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
