"""Events into the outbox (models/event.py), written by the handlers inside the transaction of
the change they report: the change and its event commit together or not at all."""

import orjson

from models import Event
from models.base import insert_rows
from models.db import database
from models.fields import utc_now
from shopapi.auth.security import Principal, current_principal
from shopapi.web.jsonifier import OPTIONS


def record(
    event_type: str,
    row,
    represent,
    owner_id: int | None = None,
    actor: Principal | None = None,
) -> None:
    """Write the event `event_type` about `row`, with `represent(row)` as its snapshot: every
    field, each version showing those it has (payloads.py). `owner_id`: the user it belongs to
    (who, besides admins, sees it); None for the catalogue, which every product reader sees.
    `actor`: who acted, when not the request's caller (the server itself, outside any
    request)."""
    if not database.in_transaction():
        raise RuntimeError(f"{event_type} must be recorded in its change's transaction")
    snapshot = represent(row)
    principal = actor or current_principal()
    Event.create(
        type=event_type,
        resource_type=event_type.partition(".")[0],
        resource_id=row.id,
        owner_id=owner_id,
        actor_subject=principal.subject,
        actor_user_id=principal.user_id,
        data=orjson.dumps(snapshot, option=OPTIONS).decode(),
    )


def record_each(events: list[tuple[str, object]], represent) -> None:
    """`record` for each (event type, row) of `events`, none of them owned, in one statement:
    a catalogue batch's thousand events in one write."""
    if not database.in_transaction():
        raise RuntimeError("events must be recorded in their change's transaction")
    principal = current_principal()
    now = utc_now()
    rows = [
        {
            "type": event_type,
            "occurred_at": now,
            "resource_type": event_type.partition(".")[0],
            "resource_id": row.id,
            "owner_id": None,
            "actor_subject": principal.subject,
            "actor_user_id": principal.user_id,
            "data": orjson.dumps(represent(row), option=OPTIONS).decode(),
        }
        for event_type, row in events
    ]
    if rows:
        insert_rows(Event, rows)
