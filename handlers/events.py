"""The event feed: what changed, for clients catching up (see models/event.py).

A caller sees the events of what it may read: product events with `products:read`, order and
user events with `orders:read` / `users:read`, its own only unless it has `admin`. Only an admin
sees who acted (`actor_subject`, `actor_user_id`), and only an admin may filter or sort by it:
anyone else could otherwise learn it by asking which events match.
"""

from connexion.exceptions import Forbidden

from models import Event
from models.table_versions import NO_ONE
from shopapi.auth.security import current_principal
from shopapi.events.payloads import event_payload, readable_resource_types
from shopapi.web.listing import list_response

_ACTOR_FIELDS = ("actor_subject", "actor_user_id")


def _visible():
    principal = current_principal()
    return Event.seen_by(principal, readable_resource_types(principal.scopes))


def _owners() -> tuple[int, ...] | None:
    """Whose events the caller's feed shows, for its tag: what its user reaches, and the
    catalogue's (no one's) if it reads products; everyone's (None) for an admin."""
    principal = current_principal()
    owners = principal.owners_reached()
    if owners is None or "product" not in readable_resource_types(principal.scopes):
        return owners
    return (*owners, NO_ONE)


def _represent():
    shows_actor = current_principal().is_admin
    return lambda event: event_payload(event, shows_actor=shows_actor)


def _actor_parameter(params: dict) -> str | None:
    """The first parameter of the request that filters or sorts by who acted, if any."""
    for argument in sorted(params):
        # Connexion hands `actor_user_id[gt]` over as `actor_user_id_gt`.
        for field in _ACTOR_FIELDS:
            if argument == field:
                return field
            if argument.startswith(f"{field}_"):
                return f"{field}[{argument.removeprefix(f'{field}_')}]"
    keys = (params.get("sort") or "").split(",")
    return "sort" if any(key.lstrip("-") in _ACTOR_FIELDS for key in keys) else None


def list_events(**params):
    parameter = _actor_parameter(params)
    if parameter is not None and not current_principal().is_admin:
        raise Forbidden(f"Only an admin may filter or sort events by who acted ({parameter}).")
    return list_response(Event, _visible(), params, _represent(), owners=_owners())


def get_event(id):
    return _represent()(_visible().where(Event.id == id).get())


def stream_events(**params):
    """Never called: shopapi/pipeline/event_stream.py answers the stream before Flask, so that
    a waiting stream holds no thread. Connexion routes every operation to a handler."""
    raise RuntimeError("GET /events/stream is answered by EventStreamMiddleware")
