"""The webhook worker: fans each new event out to the webhooks that receive it (and to mobile
push), then delivers, retrying with backoff. `python -m shopapi.events.worker` (or `make worker`),
with the settings of the environment; it expects a migrated database.

Delivery is at least once. A thread leases a delivery while it posts it; a worker that dies
leaves the lease to run out, and then any worker takes the delivery again, with the same
`webhook-id` for the receiver to drop the duplicate by. An attempt ends by its deadline
(WEBHOOK_TIMEOUT_SECONDS, shopapi/events/webhook_delivery.py), and the lease is longer, so a live
worker's attempt is never taken over and sent again while it runs. On PostgreSQL several workers
may run (rows are claimed FOR UPDATE SKIP LOCKED); on SQLite, which has one writer, run one
worker.

What a webhook gets follows its owner's current role (models/webhook.py): nothing once the
owner has lost the `webhooks` scope, only what the owner may now see. Fan-out creates no
delivery for an event that is withheld, and a pending delivery withheld by the time it is due
fails unsent, its reason in its attempt log.

A webhook gets the events of one resource in event order: a delivery waits while an earlier one
of the same resource to the same webhook is pending, or while an earlier event of the resource
has not been fanned out (another worker may be fanning it out at this moment).
"""

import datetime
import logging
import random
import signal
import sys
import threading

import peewee

from models import Delivery, DeliveryAttempt, Event, User, Webhook
from models.db import close_connection, database, is_postgresql, open_database, use
from models.fields import utc_now
from shopapi.events import push, webhook_delivery
from shopapi.events.webhook_delivery import Outcome
from shopapi.settings import ConfigurationError, Settings
from shopapi.telemetry import logs

log = logging.getLogger("shopapi.events.worker")

FAN_OUT_BATCH = 100
# A lease covers the attempt (which ends by its deadline, WEBHOOK_TIMEOUT_SECONDS, resolving
# the name included) and recording its outcome, which gets this much more.
LEASE_MARGIN_SECONDS = 5
MAX_RETRY_DELAY_SECONDS = 3600
GONE_REASON = "The receiver answered 410 Gone"


def lease_seconds(settings: Settings) -> float:
    """How long a claim holds a delivery: always longer than an attempt's deadline."""
    return settings.webhook_timeout_seconds + LEASE_MARGIN_SECONDS


def fan_out(transport: push.Transport) -> int:
    """Create the deliveries of the next batch of new events and mark them dispatched; notify
    their owners after the commit. Returns how many events were fanned out."""
    with database.atomic():
        events = list(_undispatched_events())
        if events:
            webhooks = list(_enabled_webhooks())
            for event in events:
                for webhook in webhooks:
                    if webhook.receives(event):
                        Delivery.of(webhook, event)
            dispatched = Event.id.in_([event.id for event in events])
            Event.update(dispatched_at=utc_now()).where(dispatched).execute()
    # Push is at most once: after the commit, a fan-out that rolled back notifies nobody.
    for event in events:
        notification = push.notification_for(event)
        if notification is not None:
            transport.send(notification)
    return len(events)


def _undispatched_events() -> peewee.Select:
    query = (
        Event.select().where(Event.dispatched_at.is_null()).order_by(Event.id).limit(FAN_OUT_BATCH)
    )
    return query.for_update(skip_locked=True) if is_postgresql() else query


def _enabled_webhooks() -> peewee.Select:
    # With their owners, whose role decides what the webhook may see.
    return (
        Webhook.select(Webhook, User)
        .join(User, peewee.JOIN.LEFT_OUTER)
        .where(Webhook.enabled == True)  # noqa: E712 (a peewee expression)
        .order_by(Webhook.id)
    )


def claim_due_delivery(settings: Settings) -> Delivery | None:
    """Lease the oldest delivery that may be attempted now (with its webhook and event), or
    None."""
    now = utc_now()
    with database.atomic():
        delivery = _due_deliveries(now).first()
        if delivery is None:
            return None
        delivery.leased_until = now + datetime.timedelta(seconds=lease_seconds(settings))
        Delivery.update(leased_until=delivery.leased_until, updated_at=now).where(
            Delivery.id == delivery.id
        ).execute()
    return delivery


def _due_deliveries(now: datetime.datetime) -> peewee.Select:
    """Pending deliveries that are due, not leased, to an enabled webhook, and next in line for
    their resource; oldest first. With the webhook's owner, whose current role decides whether
    the delivery may still be sent."""
    query = (
        Delivery.select(Delivery, Webhook, Event, User)
        .join_from(Delivery, Webhook)
        .join_from(Delivery, Event)
        .join_from(Webhook, User, peewee.JOIN.LEFT_OUTER)
        .where(
            Delivery.status == "pending",
            Delivery.next_attempt_at <= now,
            Delivery.leased_until.is_null() | (Delivery.leased_until <= now),
            Webhook.enabled == True,  # noqa: E712 (a peewee expression)
            ~peewee.fn.EXISTS(_earlier_pending_delivery()),
            ~peewee.fn.EXISTS(_earlier_event_not_fanned_out()),
        )
        .order_by(Delivery.id)
        .limit(1)
    )
    # OF delivery: locking the webhook's row too would make other workers skip all its deliveries.
    return query.for_update(of=Delivery, skip_locked=True) if is_postgresql() else query


def _earlier_pending_delivery() -> peewee.Select:
    earlier = Delivery.alias("earlier")
    return earlier.select(peewee.SQL("1")).where(
        earlier.webhook == Delivery.webhook,
        earlier.resource_type == Delivery.resource_type,
        earlier.resource_id == Delivery.resource_id,
        earlier.event < Delivery.event,
        earlier.status == "pending",
    )


def _earlier_event_not_fanned_out() -> peewee.Select:
    earlier = Event.alias("earlier_event")
    return earlier.select(peewee.SQL("1")).where(
        earlier.resource_type == Delivery.resource_type,
        earlier.resource_id == Delivery.resource_id,
        earlier.id < Delivery.event,
        earlier.dispatched_at.is_null(),
    )


def record(
    delivery: Delivery, outcome: Outcome, settings: Settings, result: str | None = None
) -> tuple[int, str]:
    """Keep the attempt and apply its verdict (`result`, or the outcome's) to the delivery (and,
    on 410, to the webhook). Returns the attempt's number and verdict."""
    now = utc_now()
    with database.atomic():
        # Locked and re-read: a worker whose lease ran out may be recording this delivery too.
        current = Delivery.get_for_update(delivery.id)
        number = current.attempts + 1
        DeliveryAttempt.create(
            delivery=current,
            number=number,
            attempted_at=now,
            duration_ms=outcome.duration_ms,
            response_status=outcome.status,
            error=outcome.error,
        )
        result = result or verdict(outcome, number, settings.webhook_max_attempts)
        changes = {"attempts": number, "leased_until": None, "updated_at": now}
        if current.status == "pending":  # else that other worker's attempt has settled it
            changes.update(_next_state(result, number, now, settings))
        Delivery.update(changes).where(Delivery.id == current.id).execute()
        if result == "gone":
            disabled = {"enabled": False, "disabled_reason": GONE_REASON, "updated_at": now}
            Webhook.update(disabled).where(Webhook.id == current.webhook_id).execute()
    return number, result


def verdict(outcome: Outcome, attempts: int, max_attempts: int) -> str:
    """What an attempt means: `delivered` (2xx), `gone` (410: the receiver wants no more),
    `failed` (no attempts left) or `retry` (anything else, 3xx included: no redirects)."""
    if outcome.succeeded:
        return "delivered"
    if outcome.status == 410:
        return "gone"
    if attempts >= max_attempts:
        return "failed"
    return "retry"


def _next_state(result: str, attempts: int, now: datetime.datetime, settings: Settings) -> dict:
    # Anything but a retry settles it: `failed`, `gone` and `withheld` (the owner's role no
    # longer lets it be sent: see deliver_one) fail it.
    if result == "retry":
        return {"next_attempt_at": now + retry_delay(attempts, settings)}
    return {"status": "delivered" if result == "delivered" else "failed"}


def retry_delay(attempts: int, settings: Settings) -> datetime.timedelta:
    """Exponential backoff after `attempts` failures, at most an hour, with jitter so that
    deliveries that failed together do not all come back together."""
    backoff = min(
        MAX_RETRY_DELAY_SECONDS, settings.webhook_retry_base_seconds * 2 ** (attempts - 1)
    )
    return datetime.timedelta(seconds=backoff * random.uniform(0.5, 1.0))  # noqa: S311 (jitter)


def deliver_one(settings: Settings) -> bool:
    """Attempt the next due delivery, if any; returns whether there was one."""
    delivery = claim_due_delivery(settings)
    if delivery is None:
        return False
    reason = delivery.webhook.withheld(delivery.event)
    if reason is None:
        outcome = webhook_delivery.post(delivery.webhook, delivery.event, settings)
        number, result = record(delivery, outcome, settings)
    else:
        # Not attempted: failed, with the reason kept where the receiver's answer would be.
        outcome = Outcome(status=None, error=f"not sent: {reason}", duration_ms=0)
        number, result = record(delivery, outcome, settings, result="withheld")
    _log_attempt(delivery, number, outcome, result)
    return True


def _log_attempt(delivery: Delivery, number: int, outcome: Outcome, result: str) -> None:
    fields = {
        "delivery_id": delivery.id,
        "event_id": delivery.event_id,
        "webhook_id": delivery.webhook_id,
        "attempt": number,
        "status": outcome.status,
        "error": outcome.error,
        "duration_ms": outcome.duration_ms,
        "result": result,
    }
    level = logging.INFO if result == "delivered" else logging.WARNING
    log.log(level, "webhook delivery attempt", extra={"fields": fields})


def _keep_going(name: str, job, stop: threading.Event, idle_seconds: float) -> None:
    """Run `job` until `stop`, pausing `idle_seconds` whenever it found nothing to do. A failure
    (the database away, say) is logged and the job tried again after the pause."""
    while not stop.is_set():
        try:
            busy = job()
        except Exception as error:
            log.exception("webhook worker job failed", extra={"fields": {"job": name}})
            close_connection(error)
            busy = False
        if not busy:
            stop.wait(idle_seconds)
    close_connection()


def start(settings: Settings, stop: threading.Event) -> list[threading.Thread]:
    """Start the fan-out thread and `webhook_worker_threads` delivery threads, which run until
    `stop` (finishing the delivery under way)."""
    transport = push.transport(settings.push_transport)
    jobs = {"fan-out": lambda: fan_out(transport) > 0}
    for n in range(settings.webhook_worker_threads):
        jobs[f"delivery-{n}"] = lambda: deliver_one(settings)
    threads = [
        threading.Thread(
            target=_keep_going, args=(name, job, stop, settings.webhook_poll_seconds), name=name
        )
        for name, job in jobs.items()
    ]
    for thread in threads:
        thread.start()
    return threads


def _missing_tables() -> list[str]:
    tables = [model._meta.table_name for model in (Event, Webhook, Delivery, DeliveryAttempt)]
    with database.connection_context():
        present = set(database.get_tables())
    return [table for table in tables if table not in present]


def main() -> int:
    logs.configure()
    try:
        # The worker signs no tokens or cursors: no word about their secrets.
        settings = Settings.from_env(warn_of_generated_secrets=False)
    except ConfigurationError as error:
        print(f"shopapi.events.worker: {error}", file=sys.stderr)
        return 2
    # A connection per delivery thread, and one for fan-out.
    use(open_database(settings.database_url, settings.webhook_worker_threads + 1))
    missing = _missing_tables()
    if missing:
        print(
            f"shopapi.events.worker: the database lacks the tables {', '.join(missing)}: "
            "migrate it first (make migrate, or python -m models.migrations)",
            file=sys.stderr,
        )
        return 2
    # Blocked in every thread (they inherit the mask) and waited for here: a handler that set
    # `stop` could deadlock on the Event's lock, held by the very thread it interrupted.
    stopping = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stopping)
    stop = threading.Event()
    threads = start(settings, stop)
    started = {"delivery_threads": settings.webhook_worker_threads}
    log.info("webhook worker started", extra={"fields": started})
    received = signal.sigwait(stopping)
    log.info("webhook worker stopping", extra={"fields": {"signal": signal.Signals(received).name}})
    stop.set()
    for thread in threads:
        thread.join()
    log.info("webhook worker stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
