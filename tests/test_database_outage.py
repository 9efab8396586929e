"""A database that goes away is 503 with Retry-After; the server recovers by itself."""

import time

import httpx
import pytest
from support.breakable_database import breakable
from support.helpers import assert_problem, bearer, wait_for
from support.live import live_server, signalled_server

from models.db import CHECK_IDLE_AFTER_SECONDS

pytestmark = pytest.mark.slow


ORIGIN = "https://app.example.com"


def assert_unavailable(response):
    assert_problem(response, 503)
    assert int(response.headers["retry-after"]) > 0
    # A browser client may read this error too.
    assert response.headers["access-control-allow-origin"] == ORIGIN


def test_an_outage_is_503_and_the_server_heals_by_itself(app, database_url, tmp_path):
    with (
        breakable(database_url, tmp_path) as (url, cut, restore),
        live_server(url, CORS_ORIGINS=ORIGIN) as base,
        httpx.Client(base_url=base, timeout=30, headers={**bearer(), "Origin": ORIGIN}) as http,
    ):
        for _ in range(3):  # open connections (pooled, on PostgreSQL) that the outage breaks
            assert http.get("/v1/products").status_code == 200
        admin = http.post(
            "/v1/users",
            json={"email": "a@example.com", "name": "A", "password": "12345678", "role": "admin"},
        ).json()
        key = http.post(
            "/v1/api-keys", json={"name": "k", "scopes": ["products:read"], "owner_id": admin["id"]}
        ).json()["key"]
        by_key = {"Authorization": "", "X-API-Key": key}
        assert http.get("/v1/products", headers=by_key).status_code == 200
        cut()
        assert_unavailable(http.get("/v1/products"))
        # An API key is checked against the database before the handler runs: still a 503.
        assert_unavailable(http.get("/v1/products", headers=by_key))
        new = {"sku": "DOWN-1", "name": "x", "price_cents": 1}
        assert_unavailable(http.post("/v1/products", json=new))
        restore()
        assert http.get("/v1/products").status_code == 200
        assert http.get("/v1/products", headers=by_key).status_code == 200
        assert http.post("/v1/products", json=new).status_code == 201


def test_a_pooled_connection_lost_while_idle_is_replaced_unseen(app, database_url, tmp_path):
    """A pooled connection is checked with a round trip only when it has been idle for a while
    (models/db.py): one that the server lost meanwhile is replaced before any request uses it."""
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite has no connections to lose")
    with (
        breakable(database_url, tmp_path) as (url, cut, restore),
        live_server(url) as base,
        httpx.Client(base_url=base, timeout=30, headers=bearer()) as http,
    ):
        assert http.get("/v1/products").status_code == 200
        cut()  # the pooled connection's socket is closed under it
        restore()
        time.sleep(CHECK_IDLE_AFTER_SECONDS + 0.2)
        for _ in range(5):
            assert http.get("/v1/products").status_code == 200


@pytest.mark.parametrize("production", [False, True], ids=["uvicorn", "gunicorn"])
def test_a_server_started_without_its_database_serves_once_it_answers(
    app, database_url, tmp_path, production
):
    """A host that boots during an outage stays up, alive but not ready, and needs no restart:
    the database work of its start (the admin account) is done once the database answers."""
    admin = {"ADMIN_EMAIL": "boot-admin@example.com", "ADMIN_PASSWORD": "boot-admin-pass"}
    with breakable(database_url, tmp_path) as (url, cut, restore):
        cut()
        with signalled_server(url, production, **admin) as (_, base):
            assert httpx.get(f"{base}/healthz", timeout=30).status_code == 200
            assert_problem(httpx.get(f"{base}/readyz", timeout=30), 503)
            restore()
            wait_for(
                lambda: httpx.get(f"{base}/readyz", timeout=30).status_code == 200,
                "the server to be ready once the database answers",
            )
            token = httpx.post(
                f"{base}/v1/oauth/token",
                data={
                    "grant_type": "password",
                    "username": admin["ADMIN_EMAIL"],
                    "password": admin["ADMIN_PASSWORD"],
                },
                timeout=30,
            )
            assert token.status_code == 200, token.text
