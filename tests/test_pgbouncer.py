"""The suite's PostgreSQL half reaches the server through PgBouncer in transaction mode, as each
production host does (ops/pgbouncer.ini; started by shopapi/testing/pgbouncer.py): every other
test on PostgreSQL shows the app works that way, these show that they really went through it."""

import time
from urllib.parse import urlsplit

import httpx
import psycopg2
import pytest
from support.breakable_database import breakable
from support.helpers import assert_problem, bearer
from support.live import live_server

from shopapi.testing.pgbouncer import PgBouncer

# How long a test waits for the app to answer again once PostgreSQL is back: PgBouncer tries
# the server again server_login_retry (3 s) after a failed login; generous for a busy machine.
RECOVERY_DEADLINE_SECONDS = 60


def _postgresql_only(database_url: str) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite has no server connections to pool")


def _stats_of(pgbouncer, database_url: str) -> dict:
    database = urlsplit(database_url).path.lstrip("/")
    (stats,) = [row for row in pgbouncer.show("STATS") if row["database"] == database]
    return stats


def test_the_apps_transactions_pass_through_pgbouncer_in_transaction_mode(
    client, database_url, pgbouncer
):
    _postgresql_only(database_url)
    assert urlsplit(database_url).port == pgbouncer.port
    before = _stats_of(pgbouncer, database_url)["total_xact_count"]

    created = client.post("/v1/products", json={"sku": "PGB-1", "name": "x", "price_cents": 1})
    assert created.status_code == 201
    assert client.get(created.headers["location"]).json()["sku"] == "PGB-1"

    # The write's transaction and the read's, at least, each lent a server connection.
    assert _stats_of(pgbouncer, database_url)["total_xact_count"] >= before + 2
    pools = [row for row in pgbouncer.show("POOLS") if row["database"] != "pgbouncer"]
    assert pools and {pool["pool_mode"] for pool in pools} == {"transaction"}


def test_two_clients_take_turns_on_one_server_connection(database_url, pgbouncer):
    """What transaction mode means, and why the app may keep no session state: a server
    connection is lent for a transaction, so two clients connected at once are served by the
    same PostgreSQL backend in turn (the most recently used idle one)."""
    _postgresql_only(database_url)
    first, second = psycopg2.connect(database_url), psycopg2.connect(database_url)
    try:
        backends = []
        for connection in (first, second, first):
            connection.autocommit = True
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                backends.append(cursor.fetchone()[0])
        assert backends[0] == backends[1] == backends[2]
    finally:
        first.close()
        second.close()


@pytest.mark.slow
def test_postgresql_lost_behind_pgbouncer_is_503_and_the_app_heals_by_itself(
    app, database_url, direct_database_url, tmp_path
):
    """As production fails: the primary goes away behind the host's PgBouncer, whose own
    connections to it are cut and refused (ops/pgbouncer.ini bounds the waits, so the app
    answers 503 rather than hanging), and comes back."""
    _postgresql_only(database_url)
    with breakable(direct_database_url, tmp_path) as (server_url, cut, restore):
        bouncer = PgBouncer(server_url)
        try:
            with (
                live_server(bouncer.url(server_url)) as base,
                httpx.Client(base_url=base, timeout=60, headers=bearer()) as http,
            ):
                for _ in range(3):
                    assert http.get("/v1/products").status_code == 200
                cut()
                down = http.get("/v1/products")
                assert_problem(down, 503)
                assert int(down.headers["retry-after"]) > 0
                new = {"sku": "PGB-DOWN", "name": "x", "price_cents": 1}
                assert_problem(http.post("/v1/products", json=new), 503)
                restore()
                deadline = time.monotonic() + RECOVERY_DEADLINE_SECONDS
                while (answer := http.get("/v1/products")).status_code != 200:
                    assert_problem(answer, 503)
                    assert time.monotonic() < deadline, "the app did not heal"
                    time.sleep(0.2)
                assert http.post("/v1/products", json=new).status_code == 201
        finally:
            bouncer.stop()
