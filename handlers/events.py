"""The event feed: what changed, for clients catching up (see models/event.py).

A caller sees the events of what it may read: product events with `products:read`, order and
user events with `orders:read` / `users:read`, its own only unless it has `admin`.
"""

from models import Event
from shopapi.event_payloads import event_payload
from shopapi.listing import list_response
from shopapi.representations import current_version
from shopapi.security import current_principal

_READ_SCOPES = {"product": "products:read", "order": "orders:read", "user": "users:read"}


def represent(event: Event) -> dict:
    return event_payload(event, current_version())


def _visible():
    principal = current_principal()
    readable = [kind for kind, scope in _READ_SCOPES.items() if scope in principal.scopes]
    seen = Event.seen_by(principal.user_id, principal.is_admin, readable)
    return Event.select().where(seen)


def list_events(**params):
    return list_response(Event, _visible(), params, represent)


def get_event(id):
    return represent(_visible().where(Event.id == id).get())
