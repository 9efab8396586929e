"""The webhook worker (shopapi/events/worker.py) as it runs: a real `python -m
shopapi.events.worker` process against the test database, posting to a real local receiver
(tests/support/receiver.py)."""

import os
import pathlib
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading

import orjson
import pytest
from standardwebhooks.webhooks import Webhook as ReferenceVerifier
from support.breakable_database import breakable
from support.helpers import (
    bearer,
    create_product,
    create_user,
    locked,
    place_order,
    scalar,
    wait_for,
)
from support.receiver import Drip, Hold, Receiver, in_turn
from support.tls import self_signed_certificate

from models import Delivery, DeliveryAttempt, Event, Webhook
from models.db import database
from shopapi.contract.shapes import served_event_shapes
from shopapi.events import webhook_delivery, webhook_signatures, webhook_targets
from shopapi.events.worker import fan_out
from shopapi.settings import Settings

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHAPES = served_event_shapes()  # how each version shows an event, as the worker has them
FAST = {
    "WEBHOOK_ALLOW_PRIVATE": "1",
    "DELIVERY_POLL_SECONDS": "0.05",
    "DELIVERY_RETRY_BASE_SECONDS": "0.05",
    "DELIVERY_TIMEOUT_SECONDS": "1",
}


# -- Setting up. The worker's own rules are tested on rows made through the models, which
# set exactly the events each case needs (resource ids, owners, many at once); the first test
# below goes through the API from registration to the delivery log.


def _webhook(url: str, types: list[str], **fields) -> Webhook:
    webhook = Webhook(url=url, secret=webhook_signatures.new_secret(), **fields)
    webhook.events = types
    webhook.save()
    return webhook


def _event(
    type: str,
    resource_id: int = 1,
    owner_id: int | None = None,
    actor: tuple[str, int | None] = ("client:tests", None),
    **data,
) -> Event:
    resource_type = type.partition(".")[0]
    return Event.create(
        type=type,
        resource_type=resource_type,
        resource_id=resource_id,
        owner_id=owner_id,
        actor_subject=actor[0],
        actor_user_id=actor[1],
        data=orjson.dumps({"id": resource_id, **data}).decode(),
    )


# -- The worker process, and waiting for what it does.


class WorkerProcess:
    def __init__(self, database_url: str, log_path: pathlib.Path, env: dict):
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "shopapi.events.worker"],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": database_url, **FAST, **env},
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def stop(self) -> int:
        """SIGTERM, and the exit status once it has finished what it was doing."""
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=15)
        finally:
            self._log.close()

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        self._log.close()

    def log_entries(self, message: str) -> list[dict]:
        lines = self.log_path.read_bytes().splitlines()
        entries = [orjson.loads(line) for line in lines if line.startswith(b"{")]
        return [entry for entry in entries if entry["message"] == message]


@pytest.fixture
def start_worker(app, database_url, tmp_path):
    """Start a worker on the test's (emptied) database: `start_worker(**env)`. Each one still
    running at the end is stopped with SIGTERM and must exit 0."""
    started = []

    def start(**env) -> WorkerProcess:
        worker = WorkerProcess(database_url, tmp_path / f"worker-{len(started)}.log", env)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        if worker.process.returncode is None:
            assert worker.stop() == 0, worker.log_path.read_text()


def _settled(delivery_id: int, status: str = "delivered") -> Delivery:
    def check():
        delivery = Delivery.get_by_id(delivery_id)
        return delivery if delivery.status == status else None

    return wait_for(check, f"delivery {delivery_id} to be {status}")


def _delivery_of(event: Event, webhook: Webhook) -> Delivery:
    return wait_for(
        lambda: Delivery.get_or_none(event=event, webhook=webhook),
        f"the fan-out of event {event.id}",
    )


def _attempts(delivery: Delivery) -> list[DeliveryAttempt]:
    return list(delivery.attempt_log.order_by(DeliveryAttempt.number))


def _event_ids(requests) -> list[int]:
    """The events the requests carried, found by their `webhook-id` (each event's message id)."""
    ids = {event.message_id: event.id for event in Event.select(Event.id, Event.message_id)}
    return [ids[request.headers["webhook-id"]] for request in requests]


# -- From the API to the receiver and back


@pytest.mark.slow
def test_a_webhook_registered_through_the_api_gets_a_placed_order_signed(app_with, start_worker):
    client = app_with(webhook_allow_private=True).test_client()
    client.headers.update(bearer())
    customer, mug = create_user(client), create_product(client, stock=20)
    with Receiver(in_turn(500)) as receiver:
        hook = {"url": receiver.url, "events": ["order.created", "order.cancelled"]}
        webhook = client.post("/v1/webhooks", json=hook).json()
        order = place_order(client, customer, (mug, 1)).json()
        client.patch(f"/v1/orders/{order['id']}", json={"status": "cancelled"})
        start_worker()
        wait_for(lambda: len(receiver.requests) == 3, "a retry and the second event")

    verify = ReferenceVerifier(webhook["secret"]).verify
    received = [verify(request.body, request.headers) for request in receiver.requests]
    feed = client.get("/v1/events", params={"resource_type": "order"}).json()["data"]
    assert received == [feed[0], feed[0], feed[1]]  # the first answer was a 500
    assert [event["type"] for event in feed] == ["order.created", "order.cancelled"]
    assert received[0]["data"] == order

    deliveries = f"/v1/webhooks/{webhook['id']}/deliveries"
    listed = wait_for(
        lambda: [d for d in client.get(deliveries).json()["data"] if d["status"] != "pending"],
        "both deliveries recorded",
    )
    assert [(d["event_id"], d["status"]) for d in listed] == [
        (feed[0]["id"], "delivered"),
        (feed[1]["id"], "delivered"),
    ]
    assert [a["response_status"] for a in listed[0]["attempts"]] == [500, 200]

    with Receiver(in_turn()) as receiver:
        client.patch(f"/v1/webhooks/{webhook['id']}", json={"url": receiver.url})
        again = client.post(deliveries, json={"event_id": feed[0]["id"]}).json()
        wait_for(lambda: receiver.requests, "the redelivery")
    assert verify(receiver.requests[0].body, receiver.requests[0].headers) == feed[0]
    assert _event_ids(receiver.requests) == [feed[0]["id"]]  # the event's webhook-id again
    wait_for(
        lambda: client.get(f"{deliveries}/{again['id']}").json()["status"] == "delivered",
        "the redelivery recorded",
    )


# -- Signatures


def test_the_signature_matches_the_specifications_test_vector():
    signature = webhook_signatures.signature(
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "msg_p5jXN8AQM9LWM0D4loKWxJek",
        1614265330,
        b'{"test": 2432232314}',
    )
    assert signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


@pytest.mark.slow
def test_a_delivery_verifies_with_the_reference_implementation(start_worker):
    with Receiver(in_turn()) as receiver:
        webhook = _webhook(receiver.url, ["order.created"])
        event = _event("order.created", 12, owner_id=7, status="pending", total_cents=1250)
        start_worker()
        wait_for(lambda: receiver.requests, "the delivery")

    request = receiver.requests[0]
    payload = ReferenceVerifier(webhook.secret).verify(request.body, request.headers)
    assert payload == {
        "id": event.id,
        "type": "order.created",
        "occurred_at": event.occurred_at.isoformat().replace("+00:00", "Z"),
        "resource_type": "order",
        "resource_id": 12,
        "actor_subject": "client:tests",
        "actor_user_id": None,
        "data": {"id": 12, "status": "pending", "total_cents": 1250},
    }
    assert request.headers["webhook-id"] == event.message_id
    assert request.headers["content-type"] == "application/json"
    assert request.headers["user-agent"] == "shopapi-webhooks/1"
    assert _settled(_delivery_of(event, webhook).id).attempts == 1


def _hand_out_again(event_id: int, database_url: str) -> None:
    """Make `event_id` the next event id again, as a sequence resumed on a standby promoted
    without the old primary's last writes does (or an AUTOINCREMENT counter set back)."""
    if database_url.startswith("postgresql"):
        sql = "SELECT setval(pg_get_serial_sequence('event', 'id'), %s, false)"
        database.execute_sql(sql, (event_id,))
    else:
        sql = "UPDATE sqlite_sequence SET seq = ? WHERE name = 'event'"
        database.execute_sql(sql, (event_id - 1,))


@pytest.mark.slow
def test_an_event_id_handed_out_again_comes_with_another_webhook_id(start_worker, database_url):
    """The receiver of two events under one id (the first lost in a failover) drops neither as
    a duplicate: a webhook-id is the event's own, never derived from its id."""
    with Receiver(in_turn()) as receiver:
        webhook = _webhook(receiver.url, ["order.created"])
        lost = _event("order.created", 1, owner_id=7)
        start_worker()
        _settled(_delivery_of(lost, webhook).id)
        lost.delete_instance()  # its deliveries with it
        _hand_out_again(lost.id, database_url)
        later = _event("order.created", 2, owner_id=8)
        _settled(_delivery_of(later, webhook).id)

    first, second = receiver.requests
    assert later.id == first.json["id"] == second.json["id"]
    assert (first.json["resource_id"], second.json["resource_id"]) == (1, 2)
    assert first.headers["webhook-id"] != second.headers["webhook-id"]
    assert all(
        re.fullmatch("msg_[0-9a-f]{32}", request.headers["webhook-id"])
        for request in receiver.requests
    )


@pytest.mark.slow
def test_the_payload_is_in_the_webhooks_api_version(start_worker):
    with Receiver(in_turn()) as receiver:
        _webhook(receiver.url + "/v1", ["product.created"], api_version=1)
        _webhook(receiver.url + "/v2", ["product.created"], api_version=2)
        _event("product.created", 5, price_cents=1250, currency="EUR")
        start_worker()
        wait_for(lambda: len(receiver.requests) == 2, "both deliveries")

    data = {request.path.rsplit("/", 1)[1]: request.json["data"] for request in receiver.requests}
    assert data["v1"] == {"id": 5, "price_cents": 1250, "currency": "EUR"}
    assert data["v2"] == {"id": 5, "price": {"amount": "12.50", "currency": "EUR"}}


# -- Retries


@pytest.mark.slow
def test_a_failing_receiver_gets_the_event_again_until_it_answers_2xx(start_worker):
    with Receiver(in_turn(500, 500, 200)) as receiver:
        webhook = _webhook(receiver.url, ["order.created"])
        event = _event("order.created", owner_id=7)
        worker = start_worker()
        delivery = _settled(_delivery_of(event, webhook).id)

    assert [a.response_status for a in _attempts(delivery)] == [500, 500, 200]
    assert delivery.attempts == 3
    # Every attempt under the event's one webhook-id, for the receiver to drop duplicates by.
    assert [request.headers["webhook-id"] for request in receiver.requests] == [
        event.message_id
    ] * 3
    assert worker.stop() == 0
    logged = worker.log_entries("webhook delivery attempt")
    assert [(e["attempt"], e["status"], e["result"]) for e in logged] == [
        (1, 500, "retry"),
        (2, 500, "retry"),
        (3, 200, "delivered"),
    ]
    assert {(e["delivery_id"], e["event_id"], e["webhook_id"]) for e in logged} == {
        (delivery.id, event.id, webhook.id)
    }
    assert all(isinstance(e["duration_ms"], int) for e in logged)


@pytest.mark.slow
def test_after_its_last_attempt_a_delivery_fails_and_is_not_tried_again(start_worker):
    with Receiver(in_turn(503, 503, 503)) as receiver:
        webhook = _webhook(receiver.url, ["order.created"])
        first = _event("order.created", 1, owner_id=7)
        start_worker(DELIVERY_MAX_ATTEMPTS="3")
        failed = _settled(_delivery_of(first, webhook).id, "failed")
        # A later event goes through: by then a fourth attempt of the first would have been made.
        later = _event("order.created", 2, owner_id=7)
        _settled(_delivery_of(later, webhook).id)

    assert failed.attempts == 3
    assert [a.response_status for a in _attempts(failed)] == [503, 503, 503]
    assert _event_ids(receiver.requests) == [first.id] * 3 + [later.id]


def test_a_delivery_whose_sending_raises_fails_after_its_attempts_and_others_go_on(
    start_worker,
):
    """A webhook whose secret is no base64 (written through the model: the API makes every
    secret): signing raises. Each attempt is kept as the sender's failure and counts, and the
    delivery fails after the last; another webhook's delivery of the same event goes out."""
    with Receiver(in_turn()) as receiver:
        broken = Webhook(url=receiver.url, secret="whsec_x")
        broken.events = ["order.created"]
        broken.save()
        healthy = _webhook(receiver.url, ["order.created"])
        event = _event("order.created", owner_id=7)
        worker = start_worker(DELIVERY_MAX_ATTEMPTS="3")
        failed = _settled(_delivery_of(event, broken).id, "failed")
        _settled(_delivery_of(event, healthy).id)

    assert [(a.number, a.response_status, a.error) for a in _attempts(failed)] == [
        (n, None, "the sender failed: binascii.Error") for n in (1, 2, 3)
    ]
    assert _event_ids(receiver.requests) == [event.id]
    assert worker.stop() == 0
    logged = worker.log_entries("webhook sender failed")
    assert len(logged) == 3
    assert all("Traceback" in entry["error"] for entry in logged)
    assert {entry["delivery_id"] for entry in logged} == {failed.id}


@pytest.mark.slow
def test_a_redirect_is_not_followed_but_retried(start_worker):
    with Receiver(in_turn(307)) as receiver:
        webhook = _webhook(receiver.url, ["order.created"])
        event = _event("order.created", owner_id=7)
        start_worker()
        delivery = _settled(_delivery_of(event, webhook).id)

    assert [a.response_status for a in _attempts(delivery)] == [307, 200]
    assert [request.path for request in receiver.requests] == ["/hook", "/hook"]


@pytest.mark.slow
def test_410_disables_the_webhook_and_nothing_more_is_sent_to_it(start_worker):
    with Receiver(in_turn(410)) as gone, Receiver(in_turn()) as healthy:
        leaving = _webhook(gone.url, ["order.created"])
        staying = _webhook(healthy.url, ["order.created"])
        first = _event("order.created", 1, owner_id=7)
        second = _event("order.created", 2, owner_id=7)
        start_worker(DELIVERY_THREADS="1")  # one thread: the 410 comes before the second
        _settled(_delivery_of(first, leaving).id, "failed")
        _settled(_delivery_of(second, staying).id)
        after = _event("order.created", 3, owner_id=7)
        _settled(_delivery_of(after, staying).id)

    leaving = Webhook.get_by_id(leaving.id)
    assert not leaving.enabled
    assert leaving.disabled_reason == "The receiver answered 410 Gone"
    assert _event_ids(gone.requests) == [first.id]
    assert Delivery.get(event=second, webhook=leaving).status == "pending"
    assert Delivery.get_or_none(event=after, webhook=leaving) is None


@pytest.mark.slow
def test_a_receiver_slower_than_the_timeout_is_a_failed_attempt(start_worker):
    with Receiver(in_turn(Hold(seconds=3))) as receiver:
        webhook = _webhook(receiver.url, ["order.created"])
        event = _event("order.created", owner_id=7)
        start_worker(DELIVERY_TIMEOUT_SECONDS="0.3", DELIVERY_MAX_ATTEMPTS="1")
        delivery = _settled(_delivery_of(event, webhook).id, "failed")

    [attempt] = _attempts(delivery)
    assert attempt.response_status is None
    assert attempt.error == "no answer within 0.3 s"
    assert 250 <= attempt.duration_ms < 3000  # it waited for the timeout, not for the receiver


@pytest.mark.slow
def test_a_receiver_that_drips_its_answer_costs_one_attempt_that_ends_at_the_deadline(
    start_worker,
):
    # A byte every 0.1 s for 30 s: a timeout per read (0.5 s) never fires. The attempt has one
    # deadline instead, well inside its lease (timeout + 5 s), so the second delivery thread
    # never takes the delivery over and sends it again while the first still waits.
    with Receiver(lambda request: Drip(interval=0.1, seconds=30)) as receiver:
        webhook = _webhook(receiver.url, ["order.created"])
        event = _event("order.created", owner_id=7)
        start_worker(
            DELIVERY_TIMEOUT_SECONDS="0.5", DELIVERY_MAX_ATTEMPTS="1", DELIVERY_THREADS="2"
        )
        delivery = _settled(_delivery_of(event, webhook).id, "failed")
        sent = _event_ids(receiver.requests)

    [attempt] = _attempts(delivery)
    assert attempt.response_status is None
    assert attempt.error == "no answer within 0.5 s"
    assert 450 <= attempt.duration_ms < 3000  # the deadline, not the receiver's 30 s
    assert sent == [event.id]


def test_a_resolver_that_does_not_answer_ends_the_attempt_at_its_deadline(monkeypatch):
    answering = threading.Event()
    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        if host == "partner.example":
            answering.wait(30)  # a resolver that never answers (until the test ends)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    webhook, event = _unsaved("https://partner.example/hook")
    try:
        outcome = webhook_delivery.post(
            webhook, event, Settings(delivery_timeout_seconds=0.3), SHAPES
        )
    finally:
        answering.set()
    assert outcome.status is None
    assert outcome.error == "no answer within 0.3 s"
    assert 250 <= outcome.duration_ms < 3000


# -- Crashes and stops


@pytest.mark.slow
def test_a_killed_worker_loses_nothing_the_next_one_delivers_it(start_worker):
    held = Hold()
    with Receiver(in_turn(held)) as receiver:
        webhook = _webhook(receiver.url, ["order.created"])
        event = _event("order.created", owner_id=7)
        first = start_worker(DELIVERY_TIMEOUT_SECONDS="0.5")
        wait_for(lambda: receiver.requests, "the first attempt")
        first.kill()
        held.release.set()
        start_worker(DELIVERY_TIMEOUT_SECONDS="0.5")
        # The dead worker's lease (timeout + 5 s) has to run out first.
        delivery = _settled(_delivery_of(event, webhook).id)

    assert _event_ids(receiver.requests) == [event.id, event.id]
    assert [a.response_status for a in _attempts(delivery)] == [200]


@pytest.mark.slow
def test_a_worker_started_before_its_database_waits_for_it_then_delivers(
    start_worker, database_url, tmp_path
):
    with Receiver(in_turn()) as receiver:
        _webhook(receiver.url, ["order.created"])
        _event("order.created", owner_id=7)
        with breakable(database_url, tmp_path) as (url, cut, restore):
            cut()  # nothing answers where the worker looks for its database
            worker = start_worker(DATABASE_URL=url)
            wait_for(
                lambda: len(worker.log_entries("the database does not answer, waiting for it")) > 1,
                "the worker to wait for its database, more than once",
            )
            assert worker.process.poll() is None
            restore()
            wait_for(lambda: receiver.requests, "the event to be delivered")
            assert worker.stop() == 0, worker.log_path.read_text()
    assert len(receiver.requests) == 1


@pytest.mark.slow
def test_a_cancelled_record_of_a_sent_delivery_is_kept_and_nothing_is_sent_again(
    start_worker, database_url, direct_database_url
):
    """The worker's transaction recording an attempt it made is cancelled (as a deadlock with
    a migration, or a lock or statement timeout, ends it): it is run again, so the delivery is
    not claimed again when its lease ends, and the receiver gets the event once."""
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite's one writer waits on busy_timeout: no transaction is cancelled")
    recording = (
        "SELECT COALESCE((SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND wait_event_type = 'Lock'"
        " AND query LIKE 'INSERT INTO \"delivery_attempt\"%'), 0)"
    )
    with Receiver(in_turn()) as receiver:
        webhook = _webhook(receiver.url, ["order.created"])
        event = _event("order.created", owner_id=7)
        with locked(direct_database_url, "LOCK TABLE delivery_attempt IN EXCLUSIVE MODE"):
            start_worker(DELIVERY_TIMEOUT_SECONDS="0.5", DATABASE_LOCK_TIMEOUT_SECONDS="4")
            pid = wait_for(lambda: scalar(direct_database_url, recording), "the record to wait")
            assert len(receiver.requests) == 1
            assert scalar(direct_database_url, f"SELECT pg_cancel_backend({pid})")
        delivery = _settled(_delivery_of(event, webhook).id)
        assert [a.response_status for a in _attempts(delivery)] == [200]
    assert len(receiver.requests) == 1


@pytest.mark.slow
def test_sigterm_lets_the_delivery_under_way_finish(start_worker):
    with Receiver(in_turn(Hold(seconds=0.5))) as receiver:
        webhook = _webhook(receiver.url, ["order.created"])
        event = _event("order.created", owner_id=7)
        worker = start_worker()
        wait_for(lambda: receiver.requests, "the attempt")
        assert worker.stop() == 0

    delivery = Delivery.get(event=event, webhook=webhook)
    assert delivery.status == "delivered"
    assert [a.response_status for a in _attempts(delivery)] == [200]


# -- Order and concurrency


@pytest.mark.slow
def test_the_events_of_one_resource_arrive_in_order_others_do_not_wait(start_worker):
    first_failed = []

    def fail_order_1_once(request):
        if request.json["resource_id"] == 1 and not first_failed:
            first_failed.append(request)
            return 500
        return 200

    with Receiver(fail_order_1_once) as receiver:
        webhook = _webhook(receiver.url, ["order.created", "order.status_changed"])
        events = [
            _event("order.created", 1, owner_id=7),
            _event("order.status_changed", 1, owner_id=7),
            _event("order.status_changed", 1, owner_id=7),
            _event("order.created", 2, owner_id=8),
        ]
        start_worker(DELIVERY_RETRY_BASE_SECONDS="0.5")
        for event in events:
            _settled(_delivery_of(event, webhook).id)

    received = _event_ids(receiver.requests)
    of_order_1 = [event_id for event_id in received if event_id != events[3].id]
    assert of_order_1 == [events[0].id, events[0].id, events[1].id, events[2].id]
    # Order 2's event went while order 1's first event waited for its retry.
    retry = [n for n, event_id in enumerate(received) if event_id == events[0].id][1]
    assert received.index(events[3].id) < retry


@pytest.mark.slow
def test_an_event_waits_for_an_earlier_one_another_worker_is_fanning_out(
    start_worker, database_url
):
    if database_url.startswith("sqlite"):
        pytest.skip("SQLite fans out one batch at a time: the whole database is locked")
    with Receiver(in_turn()) as receiver:
        webhook = _webhook(receiver.url, ["order.created", "order.status_changed"])
        earlier = _event("order.created", 1, owner_id=7)
        later = _event("order.status_changed", 1, owner_id=7)
        elsewhere = _event("order.created", 2, owner_id=8)
        with database.atomic():
            # What a second worker fanning out `earlier` holds: the worker skips it.
            Event.select().where(Event.id == earlier.id).for_update().get()
            start_worker(DELIVERY_THREADS="1")
            # One thread claims in id order: it had the later event's delivery to look at first.
            _settled(_delivery_of(elsewhere, webhook).id)
            assert Delivery.get(event=later, webhook=webhook).status == "pending"
        _settled(_delivery_of(later, webhook).id)

    assert _event_ids(receiver.requests) == [elsewhere.id, earlier.id, later.id]


@pytest.mark.slow
def test_two_workers_deliver_each_event_once(start_worker, database_url):
    if database_url.startswith("sqlite"):
        pytest.skip("SQLite has one writer: one worker process is the supported setup")
    with Receiver(in_turn()) as receiver:
        webhook = _webhook(receiver.url, ["product.updated"])
        events = [_event("product.updated", n % 25) for n in range(150)]
        start_worker()
        start_worker()
        wait_for(
            lambda: Delivery.select().where(Delivery.status == "delivered").count() == 150,
            "every delivery",
        )

    received = _event_ids(receiver.requests)
    assert sorted(received) == [event.id for event in events]
    for resource_id in range(25):
        of_resource = [event.id for event in events if event.resource_id == resource_id]
        assert [event_id for event_id in received if event_id in of_resource] == of_resource
    assert Delivery.select().where(Delivery.webhook == webhook).count() == 150
    # One answered attempt each. On a busy machine an attempt may also time out unanswered (and
    # be retried), which is the delivery's contract, not a second worker sending it.
    answered = DeliveryAttempt.select().where(DeliveryAttempt.response_status.is_null(False))
    assert answered.count() == 150


# -- Where webhooks may go


@pytest.mark.slow
def test_a_private_target_is_refused_without_connecting(start_worker):
    with Receiver(in_turn()) as receiver:
        webhook = _webhook(receiver.url, ["order.created"])
        event = _event("order.created", owner_id=7)
        start_worker(WEBHOOK_ALLOW_PRIVATE="0", DELIVERY_MAX_ATTEMPTS="1")
        delivery = _settled(_delivery_of(event, webhook).id, "failed")

    [attempt] = _attempts(delivery)
    assert attempt.response_status is None
    assert attempt.error == "refused: the URL is a private, loopback or reserved address"
    assert receiver.requests == []


@pytest.mark.slow
def test_an_address_registered_in_another_form_is_refused_without_connecting(start_worker):
    # URLs stored before registration refused these forms: the worker refuses them too.
    with Receiver(in_turn()) as receiver:
        port = receiver.url.split(":")[2].split("/")[0]
        forms = {
            f"http://[64:ff9b::127.0.0.1]:{port}/hook": "an IPv4 address in IPv6 form",
            f"http://[::127.0.0.1]:{port}/hook": "an IPv4 address in IPv6 form",
            f"http://[2002:7f00:1::1]:{port}/hook": "an IPv4 address in IPv6 form",
            f"http://127.1:{port}/hook": "other than as four decimal numbers",
            # Full-width digits, which IDNA turns into 127.0.0.1 (the contract's `uri` format
            # refuses them at registration).
            f"http://\uff11\uff12\uff17.\uff10.\uff10.\uff11:{port}/hook": "other than as four",
        }
        webhooks = {url: _webhook(url, ["order.created"]) for url in forms}
        event = _event("order.created", owner_id=7)
        start_worker(WEBHOOK_ALLOW_PRIVATE="0", DELIVERY_MAX_ATTEMPTS="1")
        errors = {
            url: [a.error for a in _attempts(_settled(_delivery_of(event, hook).id, "failed"))]
            for url, hook in webhooks.items()
        }

    assert receiver.requests == []
    for url, reason in forms.items():
        [error] = errors[url]
        assert error.startswith("refused: the URL "), error
        assert reason in error, error


IPV4_IN_IPV6 = "an IPv4 address in IPv6 form (mapped, compatible, NAT64, 6to4 or Teredo)"
PRIVATE = "a private, loopback or reserved address"
# What a name may resolve to, and why the worker refuses it.
RESOLVED_ADDRESSES = {
    "64:ff9b::7f00:1": IPV4_IN_IPV6,  # NAT64 of 127.0.0.1
    "64:ff9b::a9fe:a9fe": IPV4_IN_IPV6,  # NAT64 of 169.254.169.254
    "64:ff9b::808:808": IPV4_IN_IPV6,  # NAT64 of a public address: refused all the same
    "64:ff9b:1::a00:1": IPV4_IN_IPV6,
    "2002:7f00:1::1": IPV4_IN_IPV6,  # 6to4
    "2002:a00:1::": IPV4_IN_IPV6,
    "::7f00:1": IPV4_IN_IPV6,  # IPv4-compatible
    "::ffff:7f00:1": IPV4_IN_IPV6,  # IPv4-mapped
    "::ffff:a00:1": IPV4_IN_IPV6,
    "::ffff:0:a00:1": IPV4_IN_IPV6,  # IPv4-translated
    "2001:0:4136:e378:8000:63bf:3fff:fdd2": IPV4_IN_IPV6,  # Teredo
    "::1": PRIVATE,
    "::": PRIVATE,
    "fe80::1": PRIVATE,
    "fec0::1": PRIVATE,
    "fd12:3456::1": PRIVATE,
    "ff02::1": PRIVATE,
    "2001:db8::1": PRIVATE,
    "100::1": PRIVATE,
    "127.0.0.1": PRIVATE,
    "10.1.2.3": PRIVATE,
    "100.64.0.1": PRIVATE,
    "169.254.169.254": PRIVATE,
    "0.0.0.0": PRIVATE,  # noqa: S104 (an address refused, not one bound to)
    "224.0.0.1": PRIVATE,
}
PUBLIC_ADDRESSES = ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "2a00:1450:4001::200e"]


def test_the_worker_refuses_a_name_that_resolves_to_any_such_address(monkeypatch):
    answer = {}
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host != "partner.example":
            return real(host, port, *args, **kwargs)
        address = answer["address"]
        if ":" in address:
            return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, port, 0, 0))]
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    webhook, event = _unsaved("https://partner.example/hook")
    errors = {}
    for address in RESOLVED_ADDRESSES:
        answer["address"] = address
        errors[address] = webhook_delivery.post(webhook, event, Settings(), SHAPES).error
    assert errors == {
        address: f"refused: partner.example resolves to {address}, {reason}"
        for address, reason in RESOLVED_ADDRESSES.items()
    }
    assert {a: webhook_targets.address_refusal(a) for a in PUBLIC_ADDRESSES} == dict.fromkeys(
        PUBLIC_ADDRESSES
    )


# -- Whose webhook it is


@pytest.mark.slow
def test_deliveries_follow_the_owners_current_role(client, start_worker):
    customer = create_user(client)
    demoted_partner = create_user(client, role="partner")
    demoted_admin = create_user(client, role="admin")
    partner = create_user(client, role="partner")
    owners = {
        "demoted-partner": demoted_partner,
        "demoted-admin": demoted_admin,
        "partner": partner,
    }
    types = ["product.created", "order.created"]
    with Receiver(in_turn()) as receiver:
        hooks = {
            name: _webhook(f"{receiver.url}/{name}", types, owner=owner["id"])
            for name, owner in owners.items()
        }
        staff = (str(demoted_admin["id"]), demoted_admin["id"])
        before = [
            _event("product.created", 1, actor=staff),
            _event("order.created", 1, owner_id=customer["id"], actor=staff),
        ]
        fan_out(push_deliveries=False)  # their deliveries are made under the old roles
        for user, role in ((demoted_partner, "customer"), (demoted_admin, "partner")):
            changed = client.patch(f"/v1/users/{user['id']}", json={"role": role})
            assert changed.status_code == 200, changed.text
        after = [
            _event("product.created", 2, actor=staff),
            _event("order.created", 2, owner_id=customer["id"], actor=staff),
        ]
        start_worker()
        wait_for(
            lambda: (
                not Event.select().where(Event.dispatched_at.is_null()).exists()
                and not Delivery.select().where(Delivery.status == "pending").exists()
            ),
            "every event fanned out and every delivery settled",
        )

    received = {name: [] for name in hooks}
    for request in receiver.requests:
        received[request.path.rsplit("/", 1)[1]].append(request.json)
    # Which events, not in which order: they are of two resources (products 1 and 2), and the
    # worker keeps deliveries in order within one resource only (a busy machine crossed them).
    assert {name: sorted(e["id"] for e in got) for name, got in received.items()} == {
        "demoted-partner": [],  # a customer now: no webhooks
        "demoted-admin": [before[0].id, after[0].id],  # a partner now: the catalogue only
        "partner": [before[0].id, after[0].id],
    }
    # And, no admin any more, not who acted.
    assert {(e["actor_subject"], e["actor_user_id"]) for e in received["demoted-admin"]} == {
        ("", None)
    }

    def log(name):
        url = f"/v1/webhooks/{hooks[name].id}/deliveries"
        return [
            (
                d["event_id"],
                d["status"],
                [(a["response_status"], a["error"]) for a in d["attempts"]],
            )
            for d in client.get(url).json()["data"]
        ]

    assert log("demoted-partner") == [
        (
            before[0].id,
            "failed",
            [
                (
                    None,
                    f"not sent: the webhook's owner (user {demoted_partner['id']}) is now a "
                    "customer, without the webhooks scope",
                )
            ],
        )
    ]
    not_seen = f"not sent: the webhook's owner (user {demoted_admin['id']}) may no longer see"
    assert log("demoted-admin") == [
        (before[0].id, "delivered", [(200, None)]),
        (before[1].id, "failed", [(None, f"{not_seen} this event")]),
        (after[0].id, "delivered", [(200, None)]),
    ]


@pytest.mark.slow
def test_only_an_admins_webhook_is_told_who_acted(client, start_worker):
    admin, partner = create_user(client, role="admin"), create_user(client, role="partner")
    with Receiver(in_turn()) as receiver:
        _webhook(f"{receiver.url}/admin", ["product.created"], owner=admin["id"])
        _webhook(f"{receiver.url}/partner", ["product.created"], owner=partner["id"])
        _webhook(
            f"{receiver.url}/partner-v2", ["product.created"], owner=partner["id"], api_version=2
        )
        _webhook(f"{receiver.url}/no-user", ["product.created"])  # an admin's OAuth client's
        _event("product.created", 5, actor=("api-key:3", admin["id"]))
        start_worker()
        wait_for(lambda: len(receiver.requests) == 4, "the four deliveries")

    actors = {
        request.path.rsplit("/", 1)[1]: (
            request.json["actor_subject"],
            request.json["actor_user_id"],
        )
        for request in receiver.requests
    }
    assert actors == {
        "admin": ("api-key:3", admin["id"]),
        "no-user": ("api-key:3", admin["id"]),
        "partner": ("", None),
        "partner-v2": ("", None),
    }


def _unsaved(url: str) -> tuple[Webhook, Event]:
    webhook = Webhook(url=url, secret=webhook_signatures.new_secret(), api_version=1)
    event = Event(
        id=1,
        type="product.created",
        resource_type="product",
        resource_id=1,
        actor_subject="client:tests",
        data="{}",
    )
    return webhook, event


def _resolving(monkeypatch, name: str, address: str) -> None:
    """Make `name` resolve to `address` (as a DNS answer would), and only the first time: what
    the worker connects to must be the address it checked, not a second answer."""
    real = socket.getaddrinfo
    answers = [address]

    def getaddrinfo(host, port, *args, **kwargs):
        if host == name:
            assert answers, f"{name} was resolved twice"
            host = answers.pop()
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def test_a_name_that_resolves_to_a_private_address_is_refused(monkeypatch):
    _resolving(monkeypatch, "partner.example", "10.1.2.3")
    webhook, event = _unsaved("https://partner.example/hook")
    outcome = webhook_delivery.post(webhook, event, Settings(delivery_timeout_seconds=0.5), SHAPES)
    assert outcome.status is None
    assert outcome.error == (
        "refused: partner.example resolves to 10.1.2.3, a private, loopback or reserved address"
    )


def test_the_connection_goes_to_the_address_that_was_checked(monkeypatch):
    with Receiver(in_turn(204)) as receiver:
        port = receiver.url.split(":")[2].split("/")[0]
        _resolving(monkeypatch, "partner.example", "127.0.0.1")
        webhook, event = _unsaved(f"http://partner.example:{port}/hook?source=shop")
        settings = Settings(delivery_timeout_seconds=1, webhook_allow_private=True)
        outcome = webhook_delivery.post(webhook, event, settings, SHAPES)

    assert outcome.status == 204
    [request] = receiver.requests
    assert request.headers["host"] == f"partner.example:{port}"
    assert request.path == "/hook?source=shop"


def _tls_for(name: str, tmp_path) -> tuple[ssl.SSLContext, pathlib.Path]:
    """A server context with a self-signed certificate for `name`, and that certificate's file
    (for a client to trust)."""
    cert_file, key_file = self_signed_certificate(tmp_path, name)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert_file, key_file)
    return server, pathlib.Path(cert_file)


@pytest.mark.parametrize(
    ("certified", "works"), [("partner.example", True), ("other.example", False)]
)
def test_https_checks_the_certificate_against_the_host_name(
    monkeypatch, tmp_path, certified, works
):
    server_tls, cert_file = _tls_for(certified, tmp_path)
    real_context = ssl.create_default_context
    monkeypatch.setattr(ssl, "create_default_context", lambda: real_context(cafile=cert_file))
    with Receiver(in_turn(), tls=server_tls) as receiver:
        port = receiver.url.split(":")[2].split("/")[0]
        _resolving(monkeypatch, "partner.example", "127.0.0.1")
        webhook, event = _unsaved(f"https://partner.example:{port}/hook")
        settings = Settings(delivery_timeout_seconds=1, webhook_allow_private=True)
        outcome = webhook_delivery.post(webhook, event, settings, SHAPES)

    if works:
        assert outcome.status == 200
        assert [request.headers["host"] for request in receiver.requests] == [
            f"partner.example:{port}"
        ]
    else:
        assert outcome.status is None
        assert outcome.error.startswith("TLS failed:")
        assert "Hostname mismatch" in outcome.error, outcome.error
        assert receiver.requests == []
