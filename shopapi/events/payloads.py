"""An event as clients receive it: in the feed (`GET /v1/events`), its stream and a webhook's
POST, each shown by its version's shape of an event (shopapi/contract/shapes.py)."""

import orjson

from models import Event

# Who acted, as anyone but an admin sees it: an empty subject and no user. The contract keeps
# both fields in every event, `actor_subject` a string and `actor_user_id` nullable.
HIDDEN_ACTOR = {"actor_subject": "", "actor_user_id": None}

# Whose events a caller reads takes the read scope of their kind of resource.
_READ_SCOPES = {"product": "products:read", "order": "orders:read", "user": "users:read"}


def readable_resource_types(scopes) -> list[str]:
    """The kinds of resource whose events credentials with `scopes` may read."""
    return [kind for kind, scope in _READ_SCOPES.items() if scope in scopes]


def event_payload(event: Event, *, shows_actor: bool) -> dict:
    """`event` with its resource snapshot as the outbox keeps it (every field), which a version's
    shape of an event shows in that version's form. `occurred_at` stays a datetime:
    shopapi.web.jsonifier.OPTIONS writes it as RFC 3339 with `Z`. Who acted (staff, API keys,
    OAuth clients) is shown only where `shows_actor`: to an admin."""
    actor = (
        {"actor_subject": event.actor_subject, "actor_user_id": event.actor_user_id}
        if shows_actor
        else HIDDEN_ACTOR
    )
    return {
        "id": event.id,
        "type": event.type,
        "occurred_at": event.occurred_at,
        "resource_type": event.resource_type,
        "resource_id": event.resource_id,
        **actor,
        "data": orjson.loads(event.data),
    }
