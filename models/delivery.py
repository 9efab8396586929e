"""What webhook deliveries and push deliveries share: a pending row leased by one worker at a
time, each attempt kept, retried with backoff until it settles. docs/events.md tells the rules."""

import dataclasses
import datetime
import random

import peewee

from models.base import BaseModel
from models.db import database, is_postgresql
from models.fields import UTCDateTimeField, utc_now

# A claim covers an attempt (which ends by its deadline) and recording its outcome, which gets
# this much more.
LEASE_MARGIN_SECONDS = 5
MAX_RETRY_DELAY_SECONDS = 3600


@dataclasses.dataclass(frozen=True)
class Retries:
    """How often a delivery is attempted, and how long it waits between attempts."""

    max_attempts: int
    base_seconds: float

    def verdict(self, status: int | None, attempts: int) -> str:
        """What attempt number `attempts`, answered `status` (None: no answer), means to a
        webhook: `delivered` (2xx), `gone` (410: the receiver wants no more), `failed` (no
        attempts left) or `retry` (anything else, 3xx included: no redirects)."""
        if status is not None and 200 <= status < 300:
            return "delivered"
        if status == 410:
            return "gone"
        return self.after_failure(attempts)

    def after_failure(self, attempts: int) -> str:
        """`failed` once attempt number `attempts` was the last allowed, else `retry`."""
        return "failed" if attempts >= self.max_attempts else "retry"

    def delay(self, attempts: int) -> datetime.timedelta:
        """Exponential backoff after `attempts` failures, at most an hour, with jitter so that
        deliveries that failed together do not all come back together."""
        backoff = min(MAX_RETRY_DELAY_SECONDS, self.base_seconds * 2 ** (attempts - 1))
        return datetime.timedelta(seconds=backoff * random.uniform(0.5, 1.0))  # noqa: S311


class LeasedDelivery(BaseModel):
    """One thing to send to one receiver: pending until it settles (`delivered` or `failed`),
    attempted by one worker at a time under a lease that runs out if the worker dies."""

    status = peewee.CharField(max_length=16, default="pending")
    attempts = peewee.IntegerField(default=0)
    next_attempt_at = UTCDateTimeField(default=utc_now)
    # A worker delivering it holds it until then; a worker that died lets it go at that time.
    leased_until = UTCDateTimeField(null=True)

    @classmethod
    def due(cls, now: datetime.datetime) -> peewee.Expression:
        """Pending, due, and leased by no live worker."""
        return (
            (cls.status == "pending")
            & (cls.next_attempt_at <= now)
            & (cls.leased_until.is_null() | (cls.leased_until <= now))
        )

    @classmethod
    def leased(cls, now: datetime.datetime) -> peewee.Expression:
        """Pending and leased by a live worker: being attempted now."""
        return (cls.status == "pending") & (cls.leased_until > now)

    @classmethod
    def lease_first(cls, query: peewee.Select, attempt_seconds: float):
        """Lease the first row of `query` (due rows, oldest first) for an attempt that ends
        within `attempt_seconds`; or None."""
        with database.atomic():
            row = cls.lock_first(query)
            if row is not None:
                row.lease(attempt_seconds)
        return row

    @classmethod
    def lock_first(cls, query: peewee.Select):
        """The first row of `query`, or None; call it in a transaction. On PostgreSQL the row is
        locked, skipping rows other workers are claiming (OF this table only: locking joined
        rows would make other workers skip everything that shares them)."""
        if is_postgresql():
            query = query.for_update(of=cls, skip_locked=True)
        return query.limit(1).first()

    def lease(self, attempt_seconds: float) -> None:
        """Hold the row (found by `lock_first`, in its transaction) for an attempt that ends
        within `attempt_seconds`."""
        now = utc_now()
        self.leased_until = now + datetime.timedelta(seconds=attempt_seconds + LEASE_MARGIN_SECONDS)
        type(self).update(leased_until=self.leased_until, updated_at=now).where(
            type(self).id == self.id
        ).execute()

    def record_attempt(
        self,
        attempt_model,
        outcome: dict,
        verdict,
        retries: Retries,
        not_before: datetime.datetime | None = None,
    ) -> tuple[int, str, "LeasedDelivery"]:
        """Keep the attempt (`outcome`: duration_ms, response_status, error) in
        `attempt_model`, and apply its verdict (`verdict(number)`: delivered, retry, or any
        other word, which fails it) to the row, in one transaction: a retry is due after the
        backoff, and not before `not_before` (a Retry-After). Returns the attempt's number, its
        verdict and the row as it was locked, for the caller's consequences in the same
        transaction (call it inside `database.atomic()`)."""
        now = utc_now()
        # Locked and re-read: a worker whose lease ran out may be recording it too.
        current = type(self).get_for_update(self.id)
        number = current.attempts + 1
        attempt_model.create(
            **{attempt_model.delivery.name: current}, number=number, attempted_at=now, **outcome
        )
        verdict = verdict(number)
        changes = {"attempts": number, "leased_until": None, "updated_at": now}
        if current.status == "pending":  # else that other worker's attempt has settled it
            if verdict == "retry":
                due = now + retries.delay(number)
                changes["next_attempt_at"] = max(due, not_before) if not_before else due
            else:
                changes["status"] = "delivered" if verdict == "delivered" else "failed"
        type(self).update(changes).where(type(self).id == current.id).execute()
        return number, verdict, current


class Attempt(peewee.Model):
    """One attempt of a delivery (a subclass names its `delivery`)."""

    number = peewee.IntegerField()
    attempted_at = UTCDateTimeField(default=utc_now)
    duration_ms = peewee.IntegerField()
    # The receiver's status, or NULL when there was none (timeout, refused, ...: see `error`).
    response_status = peewee.IntegerField(null=True)
    error = peewee.TextField(null=True)

    class Meta:
        database = database
        legacy_table_names = False
