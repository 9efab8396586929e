"""An event as clients receive it: in the feed (`GET /v1/events`) and in a webhook's POST."""

import orjson

from models import Event
from shopapi.representations import in_version


def event_payload(event: Event, version: int) -> dict:
    """`event` with its resource snapshot in `version`'s representation (the outbox keeps v1's).
    `occurred_at` stays a datetime: shopapi.jsonifier.OPTIONS writes it as RFC 3339 with `Z`."""
    return {
        "id": event.id,
        "type": event.type,
        "occurred_at": event.occurred_at,
        "resource_type": event.resource_type,
        "resource_id": event.resource_id,
        "actor_subject": event.actor_subject,
        "actor_user_id": event.actor_user_id,
        "data": in_version(orjson.loads(event.data), version),
    }
