"""A database that goes away is 503 with Retry-After; the server recovers by itself."""

import pathlib
import shutil
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
from helpers import assert_problem
from live import live_server
from tcp_proxy import TcpProxy

pytestmark = pytest.mark.slow


def assert_unavailable(response):
    assert_problem(response, 503)
    assert int(response.headers["retry-after"]) > 0


def test_postgresql_outage_is_503_and_heals(app, database_url):
    if not database_url.startswith("postgresql"):
        pytest.skip("the SQLite outage has its own test")
    parts = urlsplit(database_url)
    proxy = TcpProxy(parts.hostname, parts.port or 5432)
    proxy.start()
    via_proxy = urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{proxy.port}"))
    with live_server(via_proxy) as base, httpx.Client(base_url=base, timeout=30) as http:
        for _ in range(3):  # fill the pool with connections that the outage will break
            assert http.get("/v1/products").status_code == 200
        proxy.stop()
        assert_unavailable(http.get("/v1/products"))
        assert_unavailable(
            http.post("/v1/products", json={"sku": "DOWN-1", "name": "x", "price_cents": 1})
        )
        proxy.start()
        assert http.get("/v1/products").status_code == 200
        created = http.post("/v1/products", json={"sku": "UP-1", "name": "x", "price_cents": 1})
        assert created.status_code == 201
    proxy.stop()


def test_sqlite_outage_is_503_and_heals(app, database_url, tmp_path):
    if not database_url.startswith("sqlite"):
        pytest.skip("the PostgreSQL outage has its own test")
    path = tmp_path / "outage.db"
    url = f"sqlite:///{path}"
    shutil.copy(pathlib.Path(database_url.removeprefix("sqlite:///")), path)
    with live_server(url) as base, httpx.Client(base_url=base, timeout=30) as http:
        assert http.get("/v1/products").status_code == 200
        # The file is gone and a directory stands in its place: SQLite cannot open it.
        path.rename(tmp_path / "away.db")
        path.mkdir()
        assert_unavailable(http.get("/v1/products"))
        path.rmdir()
        (tmp_path / "away.db").rename(path)
        assert http.get("/v1/products").status_code == 200
