"""Webhooks, and the life of each delivery of an event to one: fan-out, the claim, each attempt
and its verdict, retries. The worker (shopapi/events/worker.py) runs it; docs/events.md tells
the guarantees."""

import dataclasses
import datetime
import random

import peewee

from models.base import BaseModel
from models.db import database, is_postgresql
from models.event import Event
from models.fields import UTCDateTimeField, utc_now
from models.user import ROLE_SCOPES, User
from models.visibility import Viewer

DELIVERY_STATES = ("pending", "delivered", "failed")
# A claim covers an attempt (which ends by its deadline) and recording its outcome, which gets
# this much more.
LEASE_MARGIN_SECONDS = 5
MAX_RETRY_DELAY_SECONDS = 3600
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


@dataclasses.dataclass(frozen=True)
class Retries:
    """How often a delivery is attempted, and how long it waits between attempts."""

    max_attempts: int
    base_seconds: float

    def verdict(self, status: int | None, attempts: int) -> str:
        """What attempt number `attempts`, answered `status` (None: no answer), means:
        `delivered` (2xx), `gone` (410: the receiver wants no more), `failed` (no attempts left)
        or `retry` (anything else, 3xx included: no redirects)."""
        if status is not None and 200 <= status < 300:
            return "delivered"
        if status == 410:
            return "gone"
        if attempts >= self.max_attempts:
            return "failed"
        return "retry"

    def delay(self, attempts: int) -> datetime.timedelta:
        """Exponential backoff after `attempts` failures, at most an hour, with jitter so that
        deliveries that failed together do not all come back together."""
        backoff = min(MAX_RETRY_DELAY_SECONDS, self.base_seconds * 2 ** (attempts - 1))
        return datetime.timedelta(seconds=backoff * random.uniform(0.5, 1.0))  # noqa: S311


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

    @classmethod
    def fan_out(cls, batch: int) -> list[Event]:
        """Create the deliveries of the next `batch` new events, to each webhook that receives
        them, and mark the events dispatched, all in one transaction. Returns the events."""
        with database.atomic():
            events = list(Event.undispatched(batch))
            if events:
                webhooks = list(Webhook.enabled_with_owners())
                for event in events:
                    for webhook in webhooks:
                        if webhook.receives(event):
                            cls.of(webhook, event)
                Event.mark_dispatched(events)
        return events

    @classmethod
    def claim_due(cls, attempt_seconds: float) -> "Delivery | None":
        """Lease the oldest delivery that may be attempted now (with its webhook, its webhook's
        owner and its event), for an attempt that ends within `attempt_seconds`; or None."""
        now = utc_now()
        with database.atomic():
            delivery = cls._due(now).first()
            if delivery is None:
                return None
            lease = datetime.timedelta(seconds=attempt_seconds + LEASE_MARGIN_SECONDS)
            delivery.leased_until = now + lease
            cls.update(leased_until=delivery.leased_until, updated_at=now).where(
                cls.id == delivery.id
            ).execute()
        return delivery

    @classmethod
    def _due(cls, now: datetime.datetime) -> peewee.Select:
        """Pending deliveries that are due, not leased, to an enabled webhook, and next in line
        for their resource; oldest first."""
        query = (
            cls.select(cls, Webhook, Event, User)
            .join_from(cls, Webhook)
            .join_from(cls, Event)
            .join_from(Webhook, User, peewee.JOIN.LEFT_OUTER)
            .where(
                cls.status == "pending",
                cls.next_attempt_at <= now,
                cls.leased_until.is_null() | (cls.leased_until <= now),
                Webhook.enabled == True,  # noqa: E712 (a peewee expression)
                ~peewee.fn.EXISTS(cls._earlier_pending()),
                ~peewee.fn.EXISTS(cls._earlier_event_not_fanned_out()),
            )
            .order_by(cls.id)
            .limit(1)
        )
        # OF delivery: locking the webhook's row too would make other workers skip all its
        # deliveries.
        return query.for_update(of=cls, skip_locked=True) if is_postgresql() else query

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
        webhook. Returns the attempt's number and verdict."""
        now = utc_now()
        with database.atomic():
            # Locked and re-read: a worker whose lease ran out may be recording it too.
            current = Delivery.get_for_update(self.id)
            number = current.attempts + 1
            DeliveryAttempt.create(
                delivery=current,
                number=number,
                attempted_at=now,
                duration_ms=duration_ms,
                response_status=status,
                error=error,
            )
            verdict = verdict or retries.verdict(status, number)
            changes = {"attempts": number, "leased_until": None, "updated_at": now}
            if current.status == "pending":  # else that other worker's attempt has settled it
                changes.update(_next_state(verdict, number, now, retries))
            Delivery.update(changes).where(Delivery.id == current.id).execute()
            if verdict == "gone":
                disabled = {"enabled": False, "disabled_reason": GONE_REASON, "updated_at": now}
                Webhook.update(disabled).where(Webhook.id == current.webhook_id).execute()
        return number, verdict


def _next_state(verdict: str, attempts: int, now: datetime.datetime, retries: Retries) -> dict:
    # Anything but a retry settles it: `failed`, `gone` and `withheld` (the owner's role no
    # longer lets it be sent) fail it.
    if verdict == "retry":
        return {"next_attempt_at": now + retries.delay(attempts)}
    return {"status": "delivered" if verdict == "delivered" else "failed"}


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
