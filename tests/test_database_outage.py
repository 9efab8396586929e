"""A database that goes away is 503 with Retry-After; the server recovers by itself."""

import contextlib
import pathlib
import shutil
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
from helpers import assert_problem, bearer
from live import live_server
from tcp_proxy import TcpProxy

pytestmark = pytest.mark.slow


@contextlib.contextmanager
def breakable(database_url, tmp_path):
    """A URL to the test database, and (cut, restore) functions that take it away and back."""
    if database_url.startswith("postgresql"):
        parts = urlsplit(database_url)
        proxy = TcpProxy(parts.hostname, parts.port or 5432)
        proxy.start()
        try:
            netloc = f"{parts.username}@127.0.0.1:{proxy.port}"
            yield urlunsplit(parts._replace(netloc=netloc)), proxy.stop, proxy.start
        finally:
            proxy.stop()
    else:
        path, away = tmp_path / "outage.db", tmp_path / "away.db"
        shutil.copy(pathlib.Path(database_url.removeprefix("sqlite:///")), path)

        def cut():  # a directory where the file was: SQLite cannot open it
            path.rename(away)
            path.mkdir()

        def restore():
            path.rmdir()
            away.rename(path)

        yield f"sqlite:///{path}", cut, restore


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
