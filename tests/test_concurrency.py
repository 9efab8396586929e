"""Orders racing for the same stock, against a real server with its real thread pool."""

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from support.helpers import bearer, bearer_for
from support.live import live_server

pytestmark = pytest.mark.slow


def test_fifty_concurrent_orders_for_ten_in_stock_sell_exactly_ten(app, database_url):
    with (
        live_server(database_url) as base,
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
