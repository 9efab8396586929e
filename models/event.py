"""The outbox: one row per change a client may want to hear about, written in the transaction
of the change itself, so a change that rolls back leaves no event and a committed one always has
its event. The feed (`GET /v1/events`) reads it; the worker (shopapi/events/worker.py) fans each
event out to the webhooks subscribed to it and marks it `dispatched_at`."""

import uuid

import peewee

from models.db import database, is_postgresql
from models.fields import UTCDateTimeField, utc_now
from models.visibility import Viewer

TYPES = (
    "order.created",
    "order.status_changed",
    "order.cancelled",
    "product.created",
    "product.updated",
    "product.low_stock",
    "user.created",
)


def new_message_id() -> str:
    """A Standard Webhooks message id (`webhook-id`): `msg_` and 122 random bits, owing nothing
    to the event's id, which a sequence resumed after a failover may hand out again."""
    return "msg_" + uuid.uuid4().hex


class Event(peewee.Model):
    type = peewee.CharField(max_length=32)
    occurred_at = UTCDateTimeField(default=utc_now)
    resource_type = peewee.CharField(max_length=16)
    resource_id = peewee.BigIntegerField()
    # The user the resource belongs to (an order's customer, a user themself): besides admins,
    # only they see the event. NULL for the catalogue, which every product reader sees.
    owner_id = peewee.BigIntegerField(null=True)
    # Who made the change: the credentials' subject, and the user they act as (if any).
    actor_subject = peewee.CharField(max_length=255)
    actor_user_id = peewee.BigIntegerField(null=True)
    # The resource as it was after the change: its v1 representation, as JSON text.
    data = peewee.TextField()
    dispatched_at = UTCDateTimeField(null=True)
    # Given once, as the event is written; the same on every delivery of it (m0014).
    message_id = peewee.CharField(max_length=36, default=new_message_id)

    class Meta:
        database = database
        legacy_table_names = False

    @classmethod
    def seen_by(cls, viewer: Viewer, resource_types) -> peewee.Select:
        """The events of `resource_types` that `viewer` sees: those of what it reaches, and the
        catalogue's, which belong to no one."""
        of_types = cls.select().where(cls.resource_type.in_(list(resource_types)))
        return viewer.only_seen(of_types, cls.owner_id)

    def is_seen_by(self, viewer: Viewer, resource_types) -> bool:
        """Whether `viewer` sees this event: `seen_by`'s rule for one event in hand."""
        return self.resource_type in resource_types and viewer.sees(self.owner_id)

    @classmethod
    def latest_id(cls) -> int:
        """The id of the newest event, 0 when there is none."""
        return cls.select(peewee.fn.MAX(cls.id)).scalar() or 0

    @classmethod
    def after(cls, event_id: int, batch: int, query: peewee.Select | None = None) -> list["Event"]:
        """The first `batch` events of `query` (all events) after `event_id`, oldest first."""
        query = cls.select() if query is None else query
        return list(query.where(cls.id > event_id).order_by(cls.id).limit(batch))

    @classmethod
    def undispatched(cls, batch: int) -> peewee.Select:
        """The oldest `batch` events not fanned out yet; on PostgreSQL locked, skipping those
        another worker is fanning out."""
        query = cls.select().where(cls.dispatched_at.is_null()).order_by(cls.id).limit(batch)
        return query.for_update(skip_locked=True) if is_postgresql() else query

    @classmethod
    def mark_dispatched(cls, events: list["Event"]) -> None:
        dispatched = cls.id.in_([event.id for event in events])
        cls.update(dispatched_at=utc_now()).where(dispatched).execute()
