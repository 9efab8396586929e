"""Push notifications of events to the devices of the user an event is about: what each event
says, shaped for FCM, APNs and Web Push. Sending is push/sending.py's; see docs/events.md."""

import dataclasses

import orjson

from models import Event


@dataclasses.dataclass(frozen=True)
class PushNotification:
    user_id: int
    title: str
    body: str
    # FCM allows only string values in `data`.
    data: dict[str, str]
    # A newer notification about the same thing replaces the older one on the device.
    collapse_key: str

    def fcm_message(self, token: str) -> dict:
        """The body of FCM HTTP v1's `messages:send`, to one device's registration token (never
        a topic: any install of the app may subscribe to one)."""
        return {
            "message": {
                "token": token,
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

    def webpush_payload(self) -> dict:
        """What a service worker's `push` event reads (`event.data.json()`): the title and the
        options of `showNotification` (`tag` replaces an earlier notification of the same thing),
        and the event's data."""
        return {"title": self.title, "body": self.body, "tag": self.collapse_key, "data": self.data}


# What each event type tells the resource's owner: a title, and a body filled from the resource
# as the event recorded it. Other types (products' among them) notify nobody.
_MESSAGES = {
    "order.created": ("Order placed", "Your order {id} has been placed"),
    "order.status_changed": ("Order update", "Your order {id} is {status}"),
    "order.cancelled": ("Order cancelled", "Your order {id} has been cancelled"),
    "user.created": ("Welcome", "Welcome, {name}: your account is ready"),
}


def notifies(event: Event) -> bool:
    """Does `event` notify someone (its owner, of something there is a message for)?"""
    return event.owner_id is not None and event.type in _MESSAGES


def notification_for(event: Event) -> PushNotification | None:
    """The notification `event` sends its owner, or None (no owner, or nothing to say)."""
    if not notifies(event):
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
