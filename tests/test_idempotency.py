"""Idempotency-Key on POST /users, /products and /orders: a retry replays the first answer byte
for byte and creates nothing; another request under the same key is 422, one still running 409;
keys are per client; a 5xx leaves the key free; concurrent retries create one order; a change
commits with its answer, so a host killed at any moment or a request outliving its lease is
still done once."""

import concurrent.futures
import contextlib
import datetime
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg2
import pytest
from support.breakable_database import breakable
from support.helpers import (
    WAITS_UNBOUNDED,
    assert_problem,
    bearer,
    bearer_for,
    create_product,
    create_user,
    locked,
    place_order,
    scalar,
    wait_for,
)
from support.live import ALL_AT_ONCE, live_server, signalled_server

from models import Event, IdempotencyKey, Product
from models.db import database, is_postgresql
from models.fields import utc_now
from shopapi.pipeline.idempotency import LEASE, LIFETIME, PURGE_EVERY, fingerprint, fingerprint_key

KEY = "8e03978e-40d5-43e8-bc93-6894a57f9324"
# The identity of helpers.bearer()'s token, as the rate limits and the keys count clients.
TEST_CLIENT = "sub:client:tests"
SECRET = b"idempotency-tests-cursor-secret"
NEW_USER = {"email": "kim@example.com", "name": "Kim", "password": "correct horse"}
PRODUCT = {"sku": "KEY-001", "name": "Keyed", "price_cents": 100}


def keyed(key: str = KEY) -> dict:
    return {"Idempotency-Key": key}


def total(client, collection: str) -> int:
    return client.get(f"/v1/{collection}").json()["meta"]["total"]


def assert_replayed(replay, first):
    """`replay` is `first` again, byte for byte, marked as a replay."""
    assert replay.status_code == first.status_code
    assert replay.content == first.content
    for header in ("content-type", "content-length", "location"):
        assert replay.headers.get(header) == first.headers.get(header)
    assert replay.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers


@pytest.mark.parametrize("collection", ["users", "products", "orders"])
def test_a_retry_replays_the_first_answer_and_creates_nothing(client, collection):
    body = {"users": NEW_USER, "products": PRODUCT}.get(collection)
    if collection == "orders":
        product = create_product(client, stock=5)
        item = {"product_id": product["id"], "quantity": 2}
        body = {"user_id": create_user(client)["id"], "items": [item]}
    before = total(client, collection)

    first = client.post(f"/v1/{collection}", json=body, headers=keyed())
    assert first.status_code == 201, first.text
    retry = client.post(f"/v1/{collection}", json=body, headers=keyed())

    assert_replayed(retry, first)
    assert first.headers["location"] == f"/v1/{collection}/{first.json()['id']}"
    assert total(client, collection) == before + 1
    if collection == "orders":
        assert client.get(f"/v1/products/{product['id']}").json()["stock"] == 3


def test_the_same_key_with_another_body_is_422_and_the_first_answer_stays(client):
    body = PRODUCT
    first = client.post("/v1/products", json=body, headers=keyed())
    assert first.status_code == 201

    other = client.post("/v1/products", json={**body, "sku": "KEY-002"}, headers=keyed())

    problem = assert_problem(other, 422)
    assert "another request" in problem["detail"]
    assert problem["errors"] == [{"parameter": "Idempotency-Key", "detail": problem["detail"]}]
    assert "idempotent-replayed" not in other.headers
    assert total(client, "products") == 1
    assert_replayed(client.post("/v1/products", json=body, headers=keyed()), first)


def test_the_same_key_on_another_path_is_422(client):
    assert client.post("/v1/users", json=NEW_USER, headers=keyed()).status_code == 201

    assert_problem(client.post("/v1/products", json=PRODUCT, headers=keyed()), 422)
    assert total(client, "products") == 0


def test_clients_use_the_same_key_independently(app, client):
    user = create_user(client)
    other = app.test_client()
    other.headers.update(bearer_for(user))
    product = create_product(client, stock=5)
    order = {"user_id": user["id"], "items": [{"product_id": product["id"], "quantity": 1}]}

    mine = client.post("/v1/orders", json=order, headers=keyed())
    theirs = other.post("/v1/orders", json=order, headers=keyed())

    assert mine.status_code == theirs.status_code == 201
    assert mine.json()["id"] != theirs.json()["id"]
    assert "idempotent-replayed" not in theirs.headers
    assert total(client, "orders") == 2


def test_without_a_key_every_post_runs(client):
    user, product = create_user(client), create_product(client, stock=5)
    first = place_order(client, user, (product, 1))
    second = place_order(client, user, (product, 1))

    assert first.status_code == second.status_code == 201
    assert first.json()["id"] != second.json()["id"]
    assert "idempotent-replayed" not in second.headers
    assert client.get(f"/v1/products/{product['id']}").json()["stock"] == 3


def test_a_handlers_409_is_replayed_even_once_the_request_would_succeed(client):
    user, product = create_user(client), create_product(client, stock=1)
    order = {"user_id": user["id"], "items": [{"product_id": product["id"], "quantity": 2}]}
    first = client.post("/v1/orders", json=order, headers=keyed())
    assert_problem(first, 409)

    assert client.patch(f"/v1/products/{product['id']}", json={"stock": 10}).status_code == 200
    retry = client.post("/v1/orders", json=order, headers=keyed())

    assert_replayed(retry, first)
    assert total(client, "orders") == 0
    assert client.post("/v1/orders", json=order, headers=keyed("fresh")).status_code == 201


def test_a_handlers_422_is_replayed(client):
    order = {"user_id": create_user(client)["id"], "items": [{"product_id": 999, "quantity": 1}]}
    first = client.post("/v1/orders", json=order, headers=keyed())
    assert assert_problem(first, 422)["errors"][0]["pointer"] == "/items/0/product_id"

    assert_replayed(client.post("/v1/orders", json=order, headers=keyed()), first)


@pytest.mark.parametrize(
    "key, why",
    [
        ("k" * 256, "longer than 255 characters"),
        ("caf\u00e9", "not ASCII"),
        ("tab\there", "a control character"),
    ],
)
def test_a_key_that_is_not_1_to_255_printable_ascii_characters_is_400(client, key, why):
    body = PRODUCT
    response = client.post(
        "/v1/products",
        content=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Idempotency-Key": key.encode("latin-1")},
    )
    problem = assert_problem(response, 400)
    assert [e["parameter"] for e in problem["errors"]] == ["Idempotency-Key"], why
    assert total(client, "products") == 0
    assert client.post("/v1/products", json=body, headers=keyed("k" * 255)).status_code == 201


def test_a_key_sent_twice_is_400(client):
    body = PRODUCT
    response = client.post(
        "/v1/products",
        content=json.dumps(body).encode(),
        headers=[
            ("Content-Type", "application/json"),
            ("Idempotency-Key", "one"),
            ("Idempotency-Key", "two"),
        ],
    )
    assert assert_problem(response, 400)["errors"][0]["parameter"] == "Idempotency-Key"
    assert total(client, "products") == 0


def test_a_request_refused_by_validation_claims_no_key(client):
    refused = client.post("/v1/products", json={"sku": "bad sku"}, headers=keyed())
    assert_problem(refused, 400)

    body = PRODUCT
    created = client.post("/v1/products", json=body, headers=keyed())
    assert created.status_code == 201
    assert "idempotent-replayed" not in created.headers


def test_the_preflight_allows_the_key_and_a_replay_exposes_its_header(app_with):
    origin = "https://app.example.com"
    client = app_with(cors_origins=(origin,)).test_client()
    preflight = client.options(
        "/v1/orders",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "Authorization, Content-Type, Idempotency-Key",
        },
    )
    assert preflight.status_code == 200
    assert "idempotency-key" in preflight.headers["access-control-allow-headers"].lower()

    headers = {**bearer(), **keyed(), "Origin": origin}
    body = PRODUCT
    client.post("/v1/products", json=body, headers=headers)
    replay = client.post("/v1/products", json=body, headers=headers)
    assert replay.headers["idempotent-replayed"] == "true"
    exposed = {h.strip() for h in replay.headers["access-control-expose-headers"].split(",")}
    assert "Idempotent-Replayed" in exposed


def _claim_as_another_worker(body: dict, claimed_at: datetime.datetime, answered=False):
    """Another worker's claim on KEY for POST /v1/products with `body`, made through the model
    the middleware uses: for the states one test client cannot hold a request in (in flight,
    abandoned by a dead worker, expired)."""
    request = fingerprint(
        fingerprint_key(SECRET), "POST", "/v1/products", b"", json.dumps(body).encode()
    )
    with database.connection_context():
        token, _ = IdempotencyKey.claim(TEST_CLIENT, KEY, request, LEASE, LIFETIME)
        assert token is not None
        if answered:
            IdempotencyKey.answer(TEST_CLIENT, KEY, token, 201, "[]", b"{}")
        IdempotencyKey.update(claimed_at=claimed_at).where(IdempotencyKey.key == KEY).execute()


def _post_product(client, body: dict):
    # The exact bytes the fingerprint above was made of.
    return client.post(
        "/v1/products",
        content=json.dumps(body).encode(),
        headers={**keyed(), "Content-Type": "application/json"},
    )


@pytest.fixture
def keyed_client(app_with):
    """A client of an app whose fingerprint secret the test knows."""
    client = app_with(hmac_secret=SECRET).test_client()
    client.headers.update(bearer())
    return client


def test_a_retry_while_the_first_request_runs_is_409_with_retry_after(keyed_client):
    _claim_as_another_worker(PRODUCT, utc_now())

    response = _post_product(keyed_client, PRODUCT)

    assert "still being processed" in assert_problem(response, 409)["detail"]
    assert int(response.headers["retry-after"]) >= 1
    assert_problem(_post_product(keyed_client, {**PRODUCT, "sku": "KEY-002"}), 422)
    assert total(keyed_client, "products") == 0


def test_a_claim_abandoned_beyond_its_lease_is_taken_over_by_a_retry(keyed_client):
    _claim_as_another_worker(PRODUCT, utc_now() - LEASE - datetime.timedelta(seconds=1))

    response = _post_product(keyed_client, PRODUCT)

    assert response.status_code == 201
    assert "idempotent-replayed" not in response.headers
    assert_replayed(_post_product(keyed_client, PRODUCT), response)


def test_an_answer_older_than_a_day_is_forgotten_and_the_key_used_afresh(keyed_client):
    _claim_as_another_worker(
        {"other": "request"}, utc_now() - LIFETIME - datetime.timedelta(seconds=1), answered=True
    )

    response = _post_product(keyed_client, PRODUCT)

    assert response.status_code == 201
    assert "idempotent-replayed" not in response.headers


def test_expired_keys_are_purged_every_hundred_claims(app_with):
    client = app_with().test_client()
    client.headers.update(bearer())
    with database.connection_context():
        token, _ = IdempotencyKey.claim("sub:someone", "old", "f" * 64, LEASE, LIFETIME)
        old = utc_now() - LIFETIME - LIFETIME
        IdempotencyKey.update(claimed_at=old).where(IdempotencyKey.token == token).execute()

    def remaining():
        with database.connection_context():
            return IdempotencyKey.select().where(IdempotencyKey.key == "old").count()

    for n in range(1, PURGE_EVERY):
        body = {"sku": f"KEY-{n:03d}", "name": "Keyed", "price_cents": 100}
        assert client.post("/v1/products", json=body, headers=keyed(f"k{n}")).status_code == 201
    assert remaining() == 1
    body = {"sku": "KEY-LAST", "name": "Keyed", "price_cents": 100}
    assert client.post("/v1/products", json=body, headers=keyed("last")).status_code == 201
    assert remaining() == 0


def test_a_5xx_is_not_kept_and_a_retry_runs_again(client):
    """The product table taken away under the handler (the key's table stays): SQLite answers
    503, PostgreSQL 500. Either way the key is released, and the retry creates the product."""
    body = PRODUCT
    table = Product._meta.table_name
    with database.connection_context():
        database.execute_sql(f'ALTER TABLE "{table}" RENAME TO "{table}_away"')
    try:
        failed = client.post("/v1/products", json=body, headers=keyed())
    finally:
        with database.connection_context():
            database.execute_sql(f'ALTER TABLE "{table}_away" RENAME TO "{table}"')
    assert failed.status_code >= 500, failed.text

    retry = client.post("/v1/products", json=body, headers=keyed())

    assert retry.status_code == 201, retry.text
    assert "idempotent-replayed" not in retry.headers
    assert total(client, "products") == 1


@pytest.mark.slow
def test_a_database_outage_keeps_no_key(app, database_url, tmp_path):
    with (
        breakable(database_url, tmp_path) as (url, cut, restore),
        live_server(url) as base,
        httpx.Client(base_url=base, timeout=30, headers={**bearer(), **keyed()}) as http,
    ):
        body = PRODUCT
        assert http.get("/v1/products").status_code == 200
        cut()
        assert_problem(http.post("/v1/products", json=body), 503)
        restore()
        retry = http.post("/v1/products", json=body)
        assert retry.status_code == 201, retry.text
        assert "idempotent-replayed" not in retry.headers


@pytest.mark.slow
def test_twenty_concurrent_retries_of_one_order_place_it_once(app, database_url):
    with (
        live_server(database_url, **ALL_AT_ONCE) as base,
        httpx.Client(base_url=base, timeout=30, headers=bearer()) as http,
    ):
        user = create_user(http)
        product = create_product(http, stock=10)
        order = {"user_id": user["id"], "items": [{"product_id": product["id"], "quantity": 3}]}
        start = threading.Barrier(20)

        def place(_):
            with httpx.Client(base_url=base, timeout=30, headers=bearer_for(user)) as own:
                start.wait()
                return own.post("/v1/orders", json=order, headers=keyed())

        with ThreadPoolExecutor(max_workers=20) as pool:
            answers = list(pool.map(place, range(20)))

        created = [a for a in answers if a.status_code == 201]
        assert len(created) + sum(a.status_code == 409 for a in answers) == 20, answers
        assert created, [a.text for a in answers]
        assert {a.content for a in created} == {created[0].content}
        assert sum("idempotent-replayed" not in a.headers for a in created) == 1
        for refused in (a for a in answers if a.status_code == 409):
            assert "still being processed" in refused.json()["detail"]
        assert http.get("/v1/orders").json()["meta"]["total"] == 1
        assert http.get(f"/v1/products/{product['id']}").json()["stock"] == 7


@pytest.mark.slow
def test_a_retry_while_the_handler_waits_on_a_row_lock_is_409(app, client, database_url):
    """A real request held mid-handler: the test locks the product row the order must take
    stock from, after the request has claimed its key."""
    if not is_postgresql():
        pytest.skip(
            "SQLite has one write lock for the whole file: holding it holds the claim too, "
            "so no request can be stopped between its claim and its handler"
        )
    user, product = create_user(client), create_product(client, stock=5)
    order = {"user_id": user["id"], "items": [{"product_id": product["id"], "quantity": 1}]}
    with (
        live_server(database_url) as base,
        httpx.Client(base_url=base, timeout=30, headers={**bearer(), **keyed()}) as http,
        ThreadPoolExecutor(max_workers=1) as pool,
    ):
        with database.connection_context(), database.atomic():
            Product.select().where(Product.id == product["id"]).for_update().get()
            first = pool.submit(http.post, "/v1/orders", json=order)
            claimed = IdempotencyKey.select().where(IdempotencyKey.key == KEY)
            while not claimed.exists():  # read committed: sees the claim once it commits
                assert not first.done(), first.result().text
                time.sleep(0.01)
            retry = http.post("/v1/orders", json=order)
            assert_problem(retry, 409)
            assert int(retry.headers["retry-after"]) >= 1
        # The lock is gone with the transaction: the first request completes.
        assert first.result().status_code == 201
        assert_replayed(http.post("/v1/orders", json=order), first.result())
        assert http.get("/v1/orders").json()["meta"]["total"] == 1


# Each store of an answer fails, as if the host had died before it: the statements that set
# this up and those that end it, for each database.
_ANSWER_NEVER_STORED = {
    "sqlite": (
        [
            "CREATE TRIGGER answer_never_stored BEFORE UPDATE ON idempotency_key "
            "WHEN NEW.status IS NOT NULL BEGIN SELECT RAISE(ABORT, 'the host died'); END"
        ],
        ["DROP TRIGGER answer_never_stored"],
    ),
    "postgresql": (
        [
            "CREATE OR REPLACE FUNCTION answer_never_stored() RETURNS trigger "
            "LANGUAGE plpgsql AS $$ BEGIN IF NEW.status IS NOT NULL THEN "
            "RAISE EXCEPTION 'the host died'; END IF; RETURN NEW; END $$",
            "CREATE TRIGGER answer_never_stored BEFORE UPDATE ON idempotency_key "
            "FOR EACH ROW EXECUTE FUNCTION answer_never_stored()",
        ],
        [
            "DROP TRIGGER answer_never_stored ON idempotency_key",
            "DROP FUNCTION answer_never_stored()",
        ],
    ),
}


@contextlib.contextmanager
def _answers_never_stored():
    set_up, end = _ANSWER_NEVER_STORED["postgresql" if is_postgresql() else "sqlite"]
    with database.connection_context():
        for statement in set_up:
            database.execute_sql(statement)
    try:
        yield
    finally:
        with database.connection_context():
            for statement in end:
                database.execute_sql(statement)


def _lease_over() -> None:
    """The key's claim made older than its lease, as if the lease had passed."""
    with database.connection_context():
        old = utc_now() - LEASE - datetime.timedelta(seconds=1)
        IdempotencyKey.update(claimed_at=old).where(IdempotencyKey.key == KEY).execute()


def _events(event_type: str) -> int:
    with database.connection_context():
        return Event.select().where(Event.type == event_type).count()


@pytest.mark.parametrize("collection", ["users", "products", "orders"])
def test_a_change_whose_answer_was_never_stored_was_not_made(client, collection):
    """The host dies between the change and the storing of its answer (here the store fails).
    The change must not outlive its answer: the client's retry, once the lease is over, makes it
    once, and its answer is the one kept."""
    body = {"users": NEW_USER, "products": PRODUCT}.get(collection)
    if collection == "orders":
        product = create_product(client, stock=5)
        item = {"product_id": product["id"], "quantity": 2}
        body = {"user_id": create_user(client)["id"], "items": [item]}
    before = total(client, collection)
    created = f"{collection.removesuffix('s')}.created"
    events_before = _events(created)

    with _answers_never_stored():
        client.post(f"/v1/{collection}", json=body, headers=keyed())  # its answer never came
    _lease_over()
    retry = client.post(f"/v1/{collection}", json=body, headers=keyed())

    assert retry.status_code == 201, retry.text
    assert "idempotent-replayed" not in retry.headers
    assert total(client, collection) == before + 1
    assert _events(created) == events_before + 1
    if collection == "orders":
        assert client.get(f"/v1/products/{product['id']}").json()["stock"] == 3
    assert_replayed(client.post(f"/v1/{collection}", json=body, headers=keyed()), retry)


# The advisory lock the test holds to keep the server's store of an answer waiting.
ANSWER_GATE = 3030
ORDERS = 'SELECT count(*) FROM "order"'


class AnswerGate:
    """Each store of an Idempotency-Key's answer waits, inside its UPDATE, until the test opens
    the gate: a trigger on the key's table waits for an advisory lock the test holds. Straight to
    PostgreSQL: a session's advisory lock is no use through PgBouncer in transaction mode."""

    def __init__(self, direct_url: str):
        self.connection = psycopg2.connect(direct_url)
        self.connection.autocommit = True
        self._run(
            "CREATE OR REPLACE FUNCTION answer_gate() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "BEGIN IF NEW.status IS NOT NULL THEN "
            f"PERFORM pg_advisory_xact_lock({ANSWER_GATE}); END IF; "
            "RETURN NEW; END $$"
        )
        self._run(
            "CREATE TRIGGER answer_gate BEFORE UPDATE ON idempotency_key "
            "FOR EACH ROW EXECUTE FUNCTION answer_gate()"
        )
        self._run("SELECT pg_advisory_lock(%s)", ANSWER_GATE)

    def _run(self, statement: str, *params) -> list:
        cursor = self.connection.cursor()
        cursor.execute(statement, params)
        return cursor.fetchall() if cursor.description else []

    def waiting(self) -> list[int]:
        """The server connections whose answer waits at the gate."""
        rows = self._run(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
            "AND classid = 0 AND objid = %s",
            ANSWER_GATE,
        )
        return [pid for (pid,) in rows]

    def open(self) -> None:
        self._run("SELECT pg_advisory_unlock_all()")

    def cut_off(self, pids: list[int]) -> None:
        """A dead host's connections die with it: what they had not committed never is."""
        for pid in pids:
            self._run("SELECT pg_terminate_backend(%s)", pid)

    def close(self) -> None:
        self.open()
        self._run("DROP TRIGGER answer_gate ON idempotency_key")
        self._run("DROP FUNCTION answer_gate()")
        self.connection.close()


def _committed(direct_url: str) -> tuple[int, int, int]:
    """The orders, the (one) product's stock and the order.created events, as committed."""
    return (
        scalar(direct_url, ORDERS),
        scalar(direct_url, "SELECT stock FROM product"),
        scalar(direct_url, "SELECT count(*) FROM event WHERE type = 'order.created'"),
    )


def _waiting_on_a_row(direct_url: str, table: str, statement: str = "UPDATE") -> int:
    """How many of the server's UPDATEs (or other `statement`s) of `table` wait for another
    transaction's row lock."""
    with contextlib.closing(psycopg2.connect(direct_url)) as connection:
        cursor = connection.cursor()
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND wait_event <> 'advisory' AND query LIKE %s",
            (f'{statement} "{table}"%',),
        )
        return cursor.fetchone()[0]


# A server of the same fingerprint secret as the next one, and a lease a test can wait out.
# The requests are held on a lock past their lease on purpose: no lock timeout ends them first.
SHORT_LEASE = {
    "HMAC_SECRET": SECRET.decode(),
    "IDEMPOTENCY_LEASE_SECONDS": "1",
    **WAITS_UNBOUNDED,
}


def _product_and_order(http) -> tuple[dict, dict]:
    """A product with 5 in stock, and an order for 2 of it."""
    product = create_product(http, stock=5)
    item = {"product_id": product["id"], "quantity": 2}
    return product, {"user_id": create_user(http)["id"], "items": [item]}


def _retried(http, order: dict) -> httpx.Response:
    """The client's retry of the order, sent again while the key is in flight (within the
    first attempt's lease): the answer it ends with."""

    def answered():
        retry = http.post("/v1/orders", json=order, headers=keyed())
        in_flight = retry.status_code == 409 and "still being processed" in retry.text
        return None if in_flight else retry

    return wait_for(answered, "the first attempt's claim to run out its lease")


def _post_to_a_dying_host(base: str, order: dict) -> None:
    """The first attempt: its host dies before or after answering."""
    with contextlib.suppress(httpx.TransportError):
        httpx.post(f"{base}/v1/orders", json=order, headers={**bearer(), **keyed()}, timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize("killed", ["while storing the answer", "once the order committed"])
def test_a_host_killed_around_an_orders_answer_places_it_once(
    app, database_url, direct_database_url, killed
):
    """The outside fault run's finding: the order committed, its host killed before the answer
    was stored, and the client's retry after the lease placed a second order. Whenever the host
    dies, the retry finds the first answer or nothing done."""
    if not is_postgresql():
        pytest.skip(
            "SQLite runs no waiting trigger: a failing store stands for the crash there, in "
            "test_a_change_whose_answer_was_never_stored_was_not_made"
        )
    with (
        signalled_server(database_url, **SHORT_LEASE) as (process, base),
        httpx.Client(base_url=base, timeout=60, headers=bearer()) as http,
        concurrent.futures.ThreadPoolExecutor(1) as pool,
    ):
        _, order = _product_and_order(http)
        gate = AnswerGate(direct_database_url)
        try:
            pool.submit(_post_to_a_dying_host, base, order)
            waiting = wait_for(gate.waiting, "the order's answer to wait at the gate")
            if killed == "once the order committed":
                if not scalar(direct_database_url, ORDERS):
                    gate.open()  # the order waits with its answer: both commit now
                wait_for(lambda: scalar(direct_database_url, ORDERS), "the order to commit")
            process.kill()
            process.wait(timeout=60)
            gate.cut_off(waiting)
        finally:
            gate.close()

    with (
        live_server(database_url, **SHORT_LEASE) as base,
        httpx.Client(base_url=base, timeout=60, headers=bearer()) as http,
    ):
        retry = _retried(http, order)

    assert retry.status_code == 201, retry.text
    assert _committed(direct_database_url) == (1, 3, 1)
    assert retry.json()["id"] == scalar(direct_database_url, 'SELECT id FROM "order"')
    if killed == "once the order committed":
        assert retry.headers["idempotent-replayed"] == "true"


@pytest.mark.slow
def test_a_request_outliving_its_lease_yields_to_the_retry_that_took_its_key(
    app, database_url, direct_database_url
):
    """Held in its handler past its lease, the first attempt finds its key taken over by the
    retry when it comes to store its answer: it is rolled back (409, in flight), and the retry
    places the order once."""
    if not is_postgresql():
        pytest.skip("SQLite has one write lock: no request can be held in its handler alone")
    with (
        live_server(database_url, **SHORT_LEASE) as base,
        httpx.Client(base_url=base, timeout=60, headers=bearer()) as http,
        concurrent.futures.ThreadPoolExecutor(2) as pool,
    ):
        _, order = _product_and_order(http)
        with locked(direct_database_url, "SELECT 1 FROM product FOR UPDATE"):
            first = pool.submit(http.post, "/v1/orders", json=order, headers=keyed())
            wait_for(
                lambda: _waiting_on_a_row(direct_database_url, "product") == 1,
                "the first attempt to wait for the product's row",
            )
            retry = pool.submit(_retried, http, order)
            # Behind the first attempt: at the product's row, or before it at the customer's
            # order counter (an order's row is written before its stock is taken).
            wait_for(
                lambda: (
                    _waiting_on_a_row(direct_database_url, "product")
                    + _waiting_on_a_row(direct_database_url, "order", statement="INSERT INTO")
                    == 2
                ),
                "the retry to take the key over and wait behind the first attempt",
            )
        assert "still being processed" in assert_problem(first.result(), 409)["detail"]
        assert retry.result().status_code == 201, retry.result().text
        assert "idempotent-replayed" not in retry.result().headers
        assert_replayed(http.post("/v1/orders", json=order, headers=keyed()), retry.result())
    assert _committed(direct_database_url) == (1, 3, 1)


@pytest.mark.slow
def test_a_retry_taking_over_a_key_as_its_answer_commits_gets_that_answer(
    app, database_url, direct_database_url
):
    """The first attempt stores its answer just as its lease ends, and the retry, finding the
    key unanswered, takes it over: the takeover waits for the answer's row, then finds it
    answered and replays it, and the order is placed once."""
    if not is_postgresql():
        pytest.skip("SQLite runs no waiting trigger, and its one write lock orders the two")
    with (
        live_server(database_url, **SHORT_LEASE) as base,
        httpx.Client(base_url=base, timeout=60, headers=bearer()) as http,
        concurrent.futures.ThreadPoolExecutor(2) as pool,
    ):
        _, order = _product_and_order(http)
        gate = AnswerGate(direct_database_url)
        try:
            first = pool.submit(http.post, "/v1/orders", json=order, headers=keyed())
            wait_for(gate.waiting, "the first attempt's answer to wait at the gate")
            retry = pool.submit(_retried, http, order)
            wait_for(
                lambda: _waiting_on_a_row(direct_database_url, "idempotency_key"),
                "the retry's takeover to wait for the key's row",
            )
            gate.open()
            assert first.result().status_code == 201, first.result().text
            assert_replayed(retry.result(), first.result())
        finally:
            gate.close()
    assert _committed(direct_database_url) == (1, 3, 1)


def test_a_large_answer_is_stored_deflated_and_replayed_byte_for_byte(client):
    """A 1,000-product batch's answer is kept for a day: stored deflated, a fraction of its size,
    and replayed exactly as it was sent."""
    money = {"amount": "12.50", "currency": "EUR"}
    products = [
        {"sku": f"BIG-{n:04d}", "name": f"Product {n}", "price": money, "stock": 5}
        for n in range(1000)
    ]
    key = keyed("batch-answer-stored-small")
    first = client.post("/v3/products/batch", json={"products": products}, headers=key)
    assert first.status_code == 200, first.text
    stored = IdempotencyKey.get(IdempotencyKey.key == "batch-answer-stored-small")
    assert len(bytes(stored.body)) < len(first.content) / 10, len(bytes(stored.body))

    replay = client.post("/v3/products/batch", json={"products": products}, headers=key)
    assert_replayed(replay, first)
