"""Webhooks, and the life of each delivery of an event to one: which webhooks receive an event,
the claim, each attempt and its verdict, retries. The worker (shopapi/events/worker.py) fans
events out and runs it; docs/events.md tells the guarantees."""

import datetime

import peewee

from models.base import BaseModel
from models.db import database
from models.delivery import Attempt, LeasedDelivery, Retries
from models.event import Event
from models.fields import utc_now
from models.user import ROLE_SCOPES, User
from models.visibility import Viewer

__all__ = ["Delivery", "DeliveryAttempt", "Retries", "Webhook"]

GONE_REASON = "The receiver answered 410 Gone"


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

    @classmethod
    def enabled_with_owners(cls) -> peewee.Select:
        """The enabled webhooks, with their owners, whose role decides what each may see."""
        return (
            cls.select(cls, User)
            .join(User, peewee.JOIN.LEFT_OUTER)
            .where(cls.enabled == True)  # noqa: E712 (a peewee expression)
            .order_by(cls.id)
        )


class Delivery(LeasedDelivery):
    webhook = peewee.ForeignKeyField(Webhook, backref="deliveries", on_delete="CASCADE")
    event = peewee.ForeignKeyField(Event, backref="deliveries", on_delete="CASCADE")
    # The event's resource, kept here so that the worker delivers the events of one resource to
    # one webhook in order without a join.
    resource_type = peewee.CharField(max_length=16)
    resource_id = peewee.BigIntegerField()

    @classmethod
    def of(cls, webhook: Webhook, event: Event) -> "Delivery":
        return cls.create(
            webhook=webhook,
            event=event,
            resource_type=event.resource_type,
            resource_id=event.resource_id,
        )

    @classmethod
    def claim_due(cls, attempt_seconds: float) -> "Delivery | None":
        """Lease the oldest delivery that may be attempted now (with its webhook, its webhook's
        owner and its event), for an attempt that ends within `attempt_seconds`; or None."""
        return cls.lease_first(cls._due(utc_now()), attempt_seconds)

    @classmethod
    def _due(cls, now: datetime.datetime) -> peewee.Select:
        """Pending deliveries that are due, not leased, to an enabled webhook, and next in line
        for their resource; oldest first."""
        return (
            cls.select(cls, Webhook, Event, User)
            .join_from(cls, Webhook)
            .join_from(cls, Event)
            .join_from(Webhook, User, peewee.JOIN.LEFT_OUTER)
            .where(
                cls.due(now),
                Webhook.enabled == True,  # noqa: E712 (a peewee expression)
                ~peewee.fn.EXISTS(cls._earlier_pending()),
                ~peewee.fn.EXISTS(cls._earlier_event_not_fanned_out()),
            )
            .order_by(cls.id)
        )

    @classmethod
    def _earlier_pending(cls) -> peewee.Select:
        earlier = cls.alias("earlier")
        return earlier.select(peewee.SQL("1")).where(
            earlier.webhook == cls.webhook,
            earlier.resource_type == cls.resource_type,
            earlier.resource_id == cls.resource_id,
            earlier.event < cls.event,
            earlier.status == "pending",
        )

    @classmethod
    def _earlier_event_not_fanned_out(cls) -> peewee.Select:
        earlier = Event.alias("earlier_event")
        return earlier.select(peewee.SQL("1")).where(
            earlier.resource_type == cls.resource_type,
            earlier.resource_id == cls.resource_id,
            earlier.id < cls.event,
            earlier.dispatched_at.is_null(),
        )

    def record(
        self,
        status: int | None,
        error: str | None,
        duration_ms: int,
        retries: Retries,
        verdict: str | None = None,
    ) -> tuple[int, str]:
        """Keep the attempt (the receiver's `status`, or the `error` that left none) and apply
        its verdict (`verdict`, or the one `retries` gives) to the delivery, and on 410 to the
        webhook. Returns the attempt's number and verdict. `gone` and `withheld` (the owner's
        role no longer lets it be sent) fail it, as `failed` does."""
        outcome = {"duration_ms": duration_ms, "response_status": status, "error": error}
        with database.atomic():
            number, verdict, current = self.record_attempt(
                DeliveryAttempt,
                outcome,
                lambda number: verdict or retries.verdict(status, number),
                retries,
            )
            if verdict == "gone":
                now = utc_now()
                disabled = {"enabled": False, "disabled_reason": GONE_REASON, "updated_at": now}
                Webhook.update(disabled).where(Webhook.id == current.webhook_id).execute()
        return number, verdict


class DeliveryAttempt(Attempt):
    delivery = peewee.ForeignKeyField(Delivery, backref="attempt_log", on_delete="CASCADE")
