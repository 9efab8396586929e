"""Events into the outbox (models/event.py), written by the handlers inside the transaction of
the change they report: the change and its event commit together or not at all."""

import orjson

from models import Event
from models.db import database
from shopapi.auth.security import current_principal
from shopapi.web.jsonifier import OPTIONS


def record(event_type: str, row, represent, owner_id: int | None = None) -> None:
    """Write the event `event_type` about `row`, with `represent(row)` in v1's form as its
    snapshot. `owner_id`: the user it belongs to (who, besides admins, sees it); None for the
    catalogue, which every product reader sees."""
    if not database.in_transaction():
        raise RuntimeError(f"{event_type} must be recorded in its change's transaction")
    snapshot = getattr(represent, "__wrapped__", represent)(row)  # v1's form
    principal = current_principal()
    Event.create(
        type=event_type,
        resource_type=event_type.partition(".")[0],
        resource_id=row.id,
        owner_id=owner_id,
        actor_subject=principal.subject,
        actor_user_id=principal.user_id,
        data=orjson.dumps(snapshot, option=OPTIONS).decode(),
    )
