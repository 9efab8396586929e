"""The worker process: fans new events out to webhooks and devices, then delivers and pushes
them, retrying, with the rules of models/delivery.py. `python -m shopapi.events.worker` (or
`make worker`) on a migrated database; docs/events.md tells its guarantees.
"""

import logging
import signal
import sys
import threading
import time

from peewee import InterfaceError, OperationalError

from models import (
    Delivery,
    DeliveryAttempt,
    Device,
    Event,
    PushAttempt,
    PushDelivery,
    Webhook,
)
from models.bounds import Bounds
from models.db import close_connection, database, error_summary, open_database, use
from models.delivery import Retries
from shopapi.contract.shapes import served_event_shapes
from shopapi.events import push, webhook_delivery
from shopapi.events.push import outcomes, sending
from shopapi.events.webhook_delivery import Outcome
from shopapi.settings import ConfigurationError, Settings
from shopapi.telemetry import logs

log = logging.getLogger("shopapi.worker")

FAN_OUT_BATCH = 100
DEVICES_PER_USER = Settings.push_devices_per_user  # the setting's default
# The database lost while sending is no attempt: the job's loop waits and tries again. The same
# errors end a transaction that deadlocked, waited too long for a lock, or ran out of time.
LOST_DATABASE = (OperationalError, InterfaceError)
# Recording an attempt that was made is tried this many times, waiting twice as long each time
# from the first wait up to the longest (about 15 s in all): a record lost would have the
# delivery sent again once its lease ends.
RECORD_TRIES = 8
RECORD_FIRST_WAIT_SECONDS = 0.1
RECORD_LONGEST_WAIT_SECONDS = 5.0
# The worker started while its database does not answer waits for it, as long as it takes.
START_FIRST_WAIT_SECONDS = 0.5
START_LONGEST_WAIT_SECONDS = 10.0


def fan_out(push_deliveries: bool = True, devices_per_user: int = DEVICES_PER_USER) -> int:
    """Create the deliveries of the next batch of new events, webhooks' and (unless not
    `push_deliveries`) devices' (to at most `devices_per_user` of each owner's), and mark them
    dispatched, in one transaction. Returns how many events were fanned out."""
    with database.atomic():
        events = list(Event.undispatched(FAN_OUT_BATCH))
        if events:
            # Owner by owner: each delivery moves its owner's counter (m0018), which two
            # fan-outs then take in the same order.
            webhooks = sorted(Webhook.enabled_with_owners(), key=lambda w: (w.owner_id or 0, w.id))
            for webhook in webhooks:
                for event in events:
                    if webhook.receives(event):
                        Delivery.of(webhook, event)
            if push_deliveries:
                notifying = [event for event in events if push.notifies(event)]
                PushDelivery.fan_out(notifying, devices_per_user)
            Event.mark_dispatched(events)
    return len(events)


def deliver_one(settings: Settings, retries: Retries, event_shapes: dict) -> bool:
    """Attempt the next due delivery, if any, its event shown by `event_shapes` (each version's
    shape of an event); returns whether there was one."""
    delivery = Delivery.claim_due(attempt_seconds=settings.delivery_timeout_seconds)
    if delivery is None:
        return False
    delivered_to = {
        "delivery_id": delivery.id,
        "event_id": delivery.event_id,
        "webhook_id": delivery.webhook_id,
    }
    started = time.monotonic()
    verdict = None
    try:
        reason = delivery.webhook.withheld(delivery.event)
        if reason is None:
            outcome = webhook_delivery.post(
                delivery.webhook, delivery.event, settings, event_shapes
            )
        else:
            # Not attempted: failed, with the reason kept where the receiver's answer would be.
            outcome = Outcome(status=None, error=f"not sent: {reason}", duration_ms=0)
            verdict = "withheld"
    except LOST_DATABASE:
        raise
    except Exception as error:
        failure = _sender_failed("webhook sender failed", delivered_to, error)
        outcome = Outcome(status=None, error=failure, duration_ms=outcomes.since(started))
    number, result = _recorded(
        lambda: delivery.record(
            outcome.status, outcome.error, outcome.duration_ms, retries, verdict=verdict
        ),
        delivered_to,
    )
    _log_attempt("webhook delivery attempt", delivered_to, number, outcome, result)
    return True


def _recorded(record, delivery: dict):
    """What `record` (the transaction keeping an attempt made) returns, run again while the
    database refuses it for a while (a deadlock with a migration, a lock or statement timeout,
    the connection lost), RECORD_TRIES times at most."""
    wait = RECORD_FIRST_WAIT_SECONDS
    for _ in range(RECORD_TRIES - 1):
        try:
            return record()
        except LOST_DATABASE as error:
            fields = {**delivery, "error": error_summary(error), "retry_in_seconds": wait}
            log.warning("recording an attempt failed, trying again", extra={"fields": fields})
            close_connection(error)  # a lost connection: the next try opens another
            time.sleep(wait)
            wait = min(2 * wait, RECORD_LONGEST_WAIT_SECONDS)
    return record()


def _sender_failed(message: str, delivery: dict, error: Exception) -> str:
    """Log what a sender raised, with its traceback, and say what the attempt keeps: the kind
    of failure only (its message may quote a token or a key, and attempts are shown through
    the API). Kept as an attempt that failed, it counts towards the last one: a value that
    always makes its sender raise cannot have its delivery claimed again for ever."""
    log.exception(message, extra={"fields": delivery})
    kind = type(error)
    package = kind.__module__.partition(".")[0]
    name = kind.__qualname__ if package == "builtins" else f"{package}.{kind.__qualname__}"
    return f"the sender failed: {name}"


def _log_attempt(message: str, delivery: dict, number: int, outcome, result: str) -> None:
    """One log line per attempt, webhook or push: which delivery, what the receiver answered."""
    fields = {
        **delivery,
        "attempt": number,
        "status": outcome.status,
        "error": outcome.error,
        "duration_ms": outcome.duration_ms,
        "result": result,
    }
    level = logging.INFO if result == "delivered" else logging.WARNING
    log.log(level, message, extra={"fields": fields})


def push_one(senders, retries: Retries, timeout: float, per_owner: int = 1) -> bool:
    """Attempt the next due push delivery, if any, of an owner with fewer than `per_owner`
    being attempted; returns whether there was one. The lease covers two requests (FCM's may
    first need an access token)."""
    delivery = PushDelivery.claim_due(attempt_seconds=2 * timeout, per_owner=per_owner)
    if delivery is None:
        return False
    delivered_to = {
        "push_delivery_id": delivery.id,
        "event_id": delivery.event_id,
        "device_id": delivery.device_id,
        "platform": delivery.device.platform,
    }
    started = time.monotonic()
    try:
        notification = push.notification_for(delivery.event)
        outcome = senders.send(delivery.device, notification)
    except LOST_DATABASE:
        raise
    except Exception as error:
        failure = _sender_failed("push sender failed", delivered_to, error)
        outcome = outcomes.Outcome("retry", None, failure, outcomes.since(started))
    number, verdict = _recorded(
        lambda: delivery.record(outcome.recorded, outcome.verdict, retries, outcome.retry_after),
        delivered_to,
    )
    _log_attempt("push delivery attempt", delivered_to, number, outcome, verdict)
    return True


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
    """Start the fan-out thread and `delivery_threads` delivery threads (each delivering
    to webhooks and pushing to devices), which run until `stop` (finishing the delivery under
    way). One owner's pushes take at most a quarter of the threads (one, when fewer than eight):
    the rest are left to other owners' while its push services are slow."""
    pushing = settings.push_transport != "none"
    senders = sending.senders(settings)
    retries = Retries(settings.delivery_max_attempts, settings.delivery_retry_base_seconds)
    timeout = settings.delivery_timeout_seconds
    per_owner = max(1, settings.delivery_threads // 4)
    jobs = {"fan-out": lambda: fan_out(pushing, settings.push_devices_per_user) > 0}
    event_shapes = served_event_shapes()

    def deliver() -> bool:
        delivered = deliver_one(settings, retries, event_shapes)
        pushed = pushing and push_one(senders, retries, timeout, per_owner)
        return delivered or pushed

    for n in range(settings.delivery_threads):
        jobs[f"delivery-{n}"] = deliver
    threads = [
        threading.Thread(
            target=_keep_going, args=(name, job, stop, settings.delivery_poll_seconds), name=name
        )
        for name, job in jobs.items()
    ]
    for thread in threads:
        thread.start()
    return threads


def _missing_tables_once_answered() -> list[str]:
    """The tables the worker needs that its database lacks, asked until the database answers
    (a worker started before its database, or during an outage, waits for it)."""
    wait = START_FIRST_WAIT_SECONDS
    while True:
        try:
            return _missing_tables()
        except LOST_DATABASE as error:
            fields = {"error": error_summary(error), "retry_in_seconds": wait}
            log.warning("the database does not answer, waiting for it", extra={"fields": fields})
            close_connection(error)
            time.sleep(wait)
            wait = min(2 * wait, START_LONGEST_WAIT_SECONDS)


def _missing_tables() -> list[str]:
    needed = (Event, Webhook, Delivery, DeliveryAttempt, Device, PushDelivery, PushAttempt)
    tables = [model._meta.table_name for model in needed]
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
    use(
        open_database(
            settings.database_url,
            settings.delivery_threads + 1,
            bounds=Bounds.configured(settings),
        )
    )
    missing = _missing_tables_once_answered()
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
    started = {"delivery_threads": settings.delivery_threads}
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
