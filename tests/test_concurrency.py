"""Orders racing for the same stock, against a real server with its real thread pool; and the
row lock that keeps a change's read and write together."""

import contextlib
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg2
import pytest
from support.helpers import bearer, bearer_for, create_product
from support.live import ALL_AT_ONCE, live_server

from models import Product
from models.db import database

pytestmark = pytest.mark.slow


def test_fifty_concurrent_orders_for_ten_in_stock_sell_exactly_ten(app, database_url):
    with (
        live_server(database_url, **ALL_AT_ONCE) as base,
        httpx.Client(base_url=base, timeout=30, headers=bearer()) as http,
    ):
        user = http.post(
            "/v1/users", json={"email": "race@example.com", "name": "R", "password": "12345678"}
        ).json()
        product = http.post(
            "/v1/products", json={"sku": "RACE-1", "name": "Race", "price_cents": 1, "stock": 10}
        ).json()
        order = {"user_id": user["id"], "items": [{"product_id": product["id"], "quantity": 1}]}

        def place(_):
            with httpx.Client(base_url=base, timeout=30, headers=bearer_for(user)) as own:
                return own.post("/v1/orders", json=order).status_code

        with ThreadPoolExecutor(max_workers=50) as pool:
            statuses = list(pool.map(place, range(50)))

        assert statuses.count(201) == 10, statuses
        assert statuses.count(409) == 40, statuses
        assert http.get(f"/v1/products/{product['id']}").json()["stock"] == 0
        assert http.get("/v1/orders").json()["meta"]["total"] == 10


def test_every_thread_that_holds_a_connection_has_one_of_its_own(app, database_url):
    """The pool holds a connection for each thread that may hold one: Flask's, and the
    pipeline's own database work (API-key lookups, Idempotency-Key claims, revocation refreshes)
    and the event stream's. With a pool that does not wait (DATABASE_POOL_WAIT_SECONDS), a
    request that found none would be a 503; under load none is."""
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite has no pool")
    settings = {"DATABASE_POOL_SIZE": "1", "DATABASE_POOL_WAIT_SECONDS": "0.001"}
    with (
        live_server(database_url, **settings, **ALL_AT_ONCE) as base,
        httpx.Client(base_url=base, timeout=60, headers=bearer()) as http,
    ):
        owner = http.post(
            "/v1/users",
            json={
                "email": "pool@example.com",
                "name": "P",
                "password": "12345678",
                "role": "admin",
            },
        ).json()
        key = http.post(
            "/v1/api-keys",
            json={
                "name": "pool",
                "scopes": ["products:read", "products:write"],
                "owner_id": owner["id"],
            },
        ).json()["key"]

        def work(n: int) -> list[int]:
            headers = {"X-API-Key": key}
            with httpx.Client(base_url=base, timeout=60, headers=headers) as own:
                product = {"sku": f"POOL-{n}", "name": "Pooled", "price_cents": 1}
                created = own.post(
                    "/v1/products", json=product, headers={"Idempotency-Key": f"pool-{n}"}
                )
                return [created.status_code, own.get("/v1/products").status_code]

        with ThreadPoolExecutor(max_workers=24) as pool:
            statuses = [status for answers in pool.map(work, range(48)) for status in answers]

        assert statuses.count(201) == 48, statuses
        assert statuses.count(200) == 48, statuses


def test_a_row_read_for_update_is_locked_until_its_transaction_ends(
    client, database_url, direct_database_url
):
    """`get_for_update` (models/base.py), from SQL rendered once, locks the row it reads on
    PostgreSQL, for the rest of the transaction: another writer cannot take it meanwhile."""
    if not database_url.startswith("postgresql"):
        pytest.skip("a SQLite transaction holds the whole database's write lock")
    product = create_product(client)
    with database.connection_context():
        with database.atomic():
            assert Product.get_for_update(product["id"]).sku == product["sku"]
            with pytest.raises(psycopg2.errors.LockNotAvailable):
                _take_at_once(direct_database_url, product["id"])
        _take_at_once(direct_database_url, product["id"])


def _take_at_once(database_url: str, product_id: int) -> None:
    """Lock the product's row on a connection of its own, or fail at once if another holds it."""
    with contextlib.closing(psycopg2.connect(database_url)) as connection:
        statement = "SELECT 1 FROM product WHERE id = %s FOR UPDATE NOWAIT"
        connection.cursor().execute(statement, (product_id,))
