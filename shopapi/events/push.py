"""Mobile push notifications of events, sent at fan-out to the user an event is about: shaped
for FCM and APNs, sent by a transport (`log` or `none`). See docs/events.md."""

import dataclasses
import logging
from typing import Protocol

import orjson

from models import Event

log = logging.getLogger("shopapi.push")


@dataclasses.dataclass(frozen=True)
class PushNotification:
    user_id: int
    title: str
    body: str
    # FCM allows only string values in `data`.
    data: dict[str, str]
    # A newer notification about the same thing replaces the older one on the device.
    collapse_key: str

    def fcm_message(self) -> dict:
        """The body of FCM HTTP v1's `messages:send`, to the user's topic."""
        return {
            "message": {
                "topic": f"user-{self.user_id}",
                "notification": {"title": self.title, "body": self.body},
                "data": self.data,
                "android": {"collapse_key": self.collapse_key},
            }
        }

    def apns_payload(self) -> dict:
        """An APNs payload; `thread-id` groups the notifications of one order on the device."""
        return {
            "aps": {
                "alert": {"title": self.title, "body": self.body},
                "thread-id": self.collapse_key,
            },
            "event_id": self.data["event_id"],
        }


# What each event type tells the resource's owner: a title, and a body filled from the resource
# as the event recorded it. Other types (products' among them) notify nobody.
_MESSAGES = {
    "order.created": ("Order placed", "Your order {id} has been placed"),
    "order.status_changed": ("Order update", "Your order {id} is {status}"),
    "order.cancelled": ("Order cancelled", "Your order {id} has been cancelled"),
    "user.created": ("Welcome", "Welcome, {name}: your account is ready"),
}


def notification_for(event: Event) -> PushNotification | None:
    """The notification `event` sends its owner, or None (no owner, or nothing to say)."""
    if event.owner_id is None or event.type not in _MESSAGES:
        return None
    title, body = _MESSAGES[event.type]
    data = {
        "event_id": str(event.id),
        "type": event.type,
        "resource_type": event.resource_type,
        "resource_id": str(event.resource_id),
    }
    return PushNotification(
        user_id=event.owner_id,
        title=title,
        body=body.format(**orjson.loads(event.data)),
        data=data,
        collapse_key=f"{event.resource_type}-{event.resource_id}",
    )


class Transport(Protocol):
    def send(self, notification: PushNotification) -> None: ...


class LogTransport:
    """Writes each notification as a JSON line, in both shapes (for development and audits)."""

    def send(self, notification: PushNotification) -> None:
        log.info(
            "push notification",
            extra={
                "fields": {
                    "user_id": notification.user_id,
                    "fcm": notification.fcm_message(),
                    "apns": notification.apns_payload(),
                }
            },
        )


class NoTransport:
    def send(self, notification: PushNotification) -> None:
        pass


def transport(name: str) -> Transport:
    """The transport that PUSH_TRANSPORT names."""
    return {"log": LogTransport, "none": NoTransport}[name]()
