"""The outbox: one row per change a client may want to hear about, written in the transaction
of the change itself, so a change that rolls back leaves no event and a committed one always has
its event. The feed (`GET /v1/events`) reads it; the worker (shopapi/events/worker.py) fans each
event out to the webhooks subscribed to it and marks it `dispatched_at`."""

import functools
import operator

import peewee

from models.db import database
from models.fields import UTCDateTimeField, utc_now

TYPES = (
    "order.created",
    "order.status_changed",
    "order.cancelled",
    "product.created",
    "product.updated",
    "product.low_stock",
    "user.created",
)


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

    class Meta:
        database = database
        legacy_table_names = False

    @classmethod
    def seen_by(cls, user_id: int | None, sees_all: bool, resource_types):
        """Which events of `resource_types` a user sees (a condition): the catalogue's, and
        those of what belongs to them; `sees_all` (an admin) sees every one."""
        seen = []
        for resource_type in resource_types:
            kind = cls.resource_type == resource_type
            if sees_all or resource_type == "product":
                seen.append(kind)
            elif user_id is not None:
                seen.append(kind & (cls.owner_id == user_id))
        return functools.reduce(operator.or_, seen) if seen else peewee.SQL("1 = 0")
