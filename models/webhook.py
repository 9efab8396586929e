"""Webhooks: where a partner or admin wants events sent, and each delivery of an event there.

A delivery is one event for one webhook: pending until the receiver answers 2xx (delivered), or
until it has failed every allowed attempt or the receiver answered 410 (failed). Each attempt is
kept (DeliveryAttempt). A redelivery is a new delivery of the same event.
"""

import peewee

from models.base import BaseModel
from models.db import database
from models.event import Event
from models.fields import UTCDateTimeField, utc_now
from models.user import ROLE_SCOPES, User
from models.visibility import Viewer

DELIVERY_STATES = ("pending", "delivered", "failed")


class Webhook(BaseModel):
    # NULL for credentials that act for no user (an admin's OAuth client).
    owner = peewee.ForeignKeyField(User, null=True, backref="webhooks", on_delete="CASCADE")
    url = peewee.TextField()
    # The event types it takes, space-separated.
    event_types = peewee.TextField()
    description = peewee.TextField(null=True)
    enabled = peewee.BooleanField(default=True)
    # Why the service turned it off (the receiver answered 410 Gone); NULL when enabled by hand.
    disabled_reason = peewee.TextField(null=True)
    # The Standard Webhooks secret (`whsec_` + base64): the worker signs with it, so it is kept
    # as it is; the API shows it once, at creation.
    secret = peewee.CharField(max_length=64)
    # Payloads are in the representation of the API version the webhook was registered through.
    api_version = peewee.SmallIntegerField(default=1)

    writable = ("url", "events", "description", "enabled")

    @property
    def events(self) -> list[str]:
        return self.event_types.split()

    @events.setter
    def events(self, types: list[str]) -> None:
        self.event_types = " ".join(dict.fromkeys(types))

    # What the webhook gets follows its owner's role as it is now, not as it was at
    # registration: a partner demoted to customer gets nothing more, an admin demoted to partner
    # only what a partner sees. The worker checks at fan-out and again before each delivery.

    @property
    def owner_scopes(self) -> frozenset[str]:
        """The scopes of the owner's current role. Credentials acting for no user (which only an
        admin registers a webhook with) have all of them."""
        if self.owner_id is None:
            return ROLE_SCOPES["admin"]
        return ROLE_SCOPES.get(self.owner.role, frozenset())

    @property
    def owner_is_admin(self) -> bool:
        """Does the owner see everything, who acted included?"""
        return "admin" in self.owner_scopes

    @property
    def viewer(self) -> Viewer:
        """The owner, as they may see now (models/visibility.py)."""
        return Viewer.of(self.owner_id, self.owner_is_admin)

    def withheld(self, event: Event) -> str | None:
        """Why `event` may not be sent here now, by the owner's current role; None when it may."""
        if "webhooks" not in self.owner_scopes:
            return (
                f"the webhook's owner (user {self.owner_id}) is now a {self.owner.role}, "
                "without the webhooks scope"
            )
        if not self.viewer.sees(event.owner_id):
            return f"the webhook's owner (user {self.owner_id}) may no longer see this event"
        return None

    def receives(self, event: Event) -> bool:
        """Is `event` sent here? It must be of a subscribed type, not withheld by the owner's
        current role, and not older than the webhook: a new webhook gets no backlog."""
        return (
            self.enabled
            and event.type in self.events
            and self.withheld(event) is None
            and self.created_at <= event.occurred_at
        )


class Delivery(BaseModel):
    webhook = peewee.ForeignKeyField(Webhook, backref="deliveries", on_delete="CASCADE")
    event = peewee.ForeignKeyField(Event, backref="deliveries", on_delete="CASCADE")
    # The event's resource, kept here so that the worker delivers the events of one resource to
    # one webhook in order without a join.
    resource_type = peewee.CharField(max_length=16)
    resource_id = peewee.BigIntegerField()
    status = peewee.CharField(max_length=16, default="pending")
    attempts = peewee.IntegerField(default=0)
    next_attempt_at = UTCDateTimeField(default=utc_now)
    # A worker delivering it holds it until then; a worker that died lets it go at that time.
    leased_until = UTCDateTimeField(null=True)

    @classmethod
    def of(cls, webhook: Webhook, event: Event) -> "Delivery":
        return cls.create(
            webhook=webhook,
            event=event,
            resource_type=event.resource_type,
            resource_id=event.resource_id,
        )


class DeliveryAttempt(peewee.Model):
    delivery = peewee.ForeignKeyField(Delivery, backref="attempt_log", on_delete="CASCADE")
    number = peewee.IntegerField()
    attempted_at = UTCDateTimeField(default=utc_now)
    duration_ms = peewee.IntegerField()
    # The receiver's status, or NULL when there was none (timeout, refused, ...: see `error`).
    response_status = peewee.IntegerField(null=True)
    error = peewee.TextField(null=True)

    class Meta:
        database = database
        legacy_table_names = False
