"""Database work is bounded: a request waiting on a lock another holds is a 503 with Retry-After
within the lock timeout, its work rolled back; a session left idle in a transaction (its host
cut off) is ended by the server, its locks freed; a transaction lost to a deadlock is a 409."""

import concurrent.futures
import contextlib
import time
import uuid

import httpx
import peewee
import psycopg2
import pytest
from support.helpers import assert_problem, bearer, create_product, create_user, scalar, wait_for
from support.live import live_server

from models.bounds import Bounds
from models.db import open_database

pytestmark = pytest.mark.slow

SHORT = {"database_lock_timeout_seconds": 0.5, "database_statement_timeout_seconds": 3.0}


@pytest.fixture(params=["pgbouncer", "direct"])
def postgresql_url(request, database_url, direct_database_url):
    """This run's PostgreSQL database, through PgBouncer (which refuses connection options:
    each transaction sets its bounds) and straight to the server (options at connection)."""
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite has no lock or statement timeouts; one writer waits busy_timeout")
    return database_url if request.param == "pgbouncer" else direct_database_url


@contextlib.contextmanager
def row_held(direct_url: str, product_id: int):
    """The product's row locked by a transaction of the test's own, until the block ends."""
    connection = psycopg2.connect(direct_url)
    try:
        connection.cursor().execute("SELECT 1 FROM product WHERE id = %s FOR UPDATE", (product_id,))
        yield connection
    finally:
        connection.rollback()
        connection.close()


def test_a_change_waiting_on_a_held_row_is_503_within_the_lock_timeout(
    app, app_with, postgresql_url, direct_database_url
):
    client = app_with(database_url=postgresql_url, **SHORT).test_client()
    client.headers.update(bearer())
    product = create_product(client, price_cents=100)
    with row_held(direct_database_url, product["id"]):
        started = time.monotonic()
        response = client.patch(f"/v1/products/{product['id']}", json={"price_cents": 200})
        waited = time.monotonic() - started
    body = assert_problem(response, 503)
    assert "in time" in body["detail"]
    assert int(response.headers["retry-after"]) > 0
    assert waited < SHORT["database_statement_timeout_seconds"], waited
    # Nothing of it was written: the price, and no product.updated event.
    assert client.get(f"/v1/products/{product['id']}").json()["price_cents"] == 100
    updated = "SELECT count(*) FROM event WHERE type = 'product.updated'"
    assert scalar(direct_database_url, updated) == 0
    again = client.patch(f"/v1/products/{product['id']}", json={"price_cents": 200})
    assert again.status_code == 200, again.text


def test_a_session_idle_in_a_transaction_is_ended_and_its_locks_freed(
    app, app_with, postgresql_url, direct_database_url
):
    """A host cut off from the database mid-transaction (its session idle in the transaction,
    holding a product's row): the server ends that session, and others' changes go through."""
    client = app_with(database_url=postgresql_url, **SHORT).test_client()
    client.headers.update(bearer())
    product = create_product(client, price_cents=100)
    cut_off = open_database(postgresql_url, 1, bounds=Bounds(idle_in_transaction_timeout=1.0))
    cut_off.connect()
    cut_off.begin()
    cut_off.execute_sql("SELECT 1 FROM product WHERE id = %s FOR UPDATE", (product["id"],))
    ended = "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction'"
    # The session is ended after a second idle; until then the change may time out on its lock.
    wait_for(lambda: scalar(direct_database_url, ended) == 0, "the idle session to be ended")
    changed = client.patch(f"/v1/products/{product['id']}", json={"price_cents": 200})
    assert changed.status_code == 200, changed.text
    with pytest.raises((peewee.OperationalError, peewee.InterfaceError)):
        cut_off.execute_sql("SELECT 1")
    cut_off.close_all()


def test_a_statement_beyond_the_statement_timeout_is_cancelled(
    postgresql_url, database_url, direct_database_url
):
    """In a transaction wherever the database is; outside one too when straight to PostgreSQL
    (PgBouncer's own query_timeout bounds those: ops/pgbouncer.ini)."""
    db = open_database(postgresql_url, 1, bounds=Bounds(statement_timeout=0.2, lock_timeout=0.1))
    try:
        with db.connection_context():
            with pytest.raises(peewee.OperationalError) as raised, db.atomic():
                db.execute_sql("SELECT pg_sleep(2)")
            assert "statement timeout" in str(raised.value)
            through_pgbouncer = postgresql_url != direct_database_url
            assert db.options_refused == through_pgbouncer
            if not through_pgbouncer:  # the session's own bound, outside transactions too
                with pytest.raises(peewee.OperationalError, match="statement timeout"):
                    db.execute_sql("SELECT pg_sleep(2)")
    finally:
        db.close_all()


def test_an_order_that_deadlocks_is_409_and_its_keyed_retry_runs(
    app, database_url, direct_database_url
):
    """An order waiting for its second product's row while a transaction holding it waits for
    the first: PostgreSQL ends the order's transaction. Nothing was done, so it is a 409 with
    Retry-After (not a 503 'database unavailable'), and a retry with the same Idempotency-Key
    runs again rather than replaying that answer."""
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite has one writer: no deadlock")
    with (
        live_server(database_url, DATABASE_LOCK_TIMEOUT_SECONDS="4") as base,
        httpx.Client(base_url=base, timeout=60, headers=bearer()) as http,
        concurrent.futures.ThreadPoolExecutor(1) as pool,
    ):
        user = create_user(http)
        first, second = create_product(http), create_product(http)
        order = {
            "user_id": user["id"],
            "items": [{"product_id": p["id"], "quantity": 1} for p in (first, second)],
        }
        key = {"Idempotency-Key": str(uuid.uuid4())}
        holder = psycopg2.connect(direct_database_url)
        try:
            cursor = holder.cursor()
            # This session never looks for the deadlock: the order's does, and gives way.
            cursor.execute("SET deadlock_timeout = '60s'")
            cursor.execute("SELECT 1 FROM product WHERE id = %s FOR UPDATE", (second["id"],))
            placed = pool.submit(http.post, "/v1/orders", json=order, headers=key)
            waiting = (
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND query LIKE 'UPDATE%%product%%'"
            )
            wait_for(lambda: scalar(direct_database_url, waiting) == 1, "the order to wait")
            cursor.execute("SELECT 1 FROM product WHERE id = %s FOR UPDATE", (first["id"],))
            response = placed.result()
        finally:
            holder.rollback()
            holder.close()
        body = assert_problem(response, 409)
        assert "concurrent" in body["detail"]
        assert int(response.headers["retry-after"]) > 0
        assert http.get(f"/v1/products/{first['id']}").json()["stock"] == first["stock"]
        retried = http.post("/v1/orders", json=order, headers=key)
        assert retried.status_code == 201, retried.text
        assert "idempotent-replayed" not in retried.headers
