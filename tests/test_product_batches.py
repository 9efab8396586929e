"""v3's catalogue batch under load: its writes are a few statements whatever its size (a short
write phase, not a statement per product under locks), and two batches creating the same SKUs in
opposite orders both succeed, never a deadlock's 503."""

import concurrent.futures
import logging

import httpx
import pytest
from support.helpers import bearer, create_product
from support.live import live_server


def _item(sku: str, amount: str = "9.90", stock: int = 50) -> dict:
    money = {"amount": amount, "currency": "EUR"}
    return {"sku": sku, "name": f"Product {sku}", "price": money, "stock": stock}


def _writes(caplog, client, products: list[dict]) -> list[str]:
    """The SQL statements writing a batch of `products` ran, as Peewee logs each one."""
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="peewee"):
        response = client.post("/v3/products/batch", json={"products": products})
    assert response.status_code == 200, response.text
    statements = [str(r.msg[0]) for r in caplog.records if r.name == "peewee"]
    return [sql for sql in statements if not sql.startswith(("SELECT", "SAVEPOINT", "RELEASE"))]


def test_a_batchs_writes_are_a_few_statements_whatever_its_size(client, caplog):
    for n in range(20):
        create_product(client, sku=f"OLD-{n:04d}", stock=50)

    def batch(size: int, amount: str) -> list[dict]:
        # Half new products, half replacing the ones above (a stock falling below the
        # low-stock threshold for some).
        new = [_item(f"NEW-{size}-{n:04d}", amount) for n in range(size // 2)]
        known = [_item(f"OLD-{n:04d}", amount, stock=n % 3) for n in range(size // 2)]
        return new + known

    small = _writes(caplog, client, batch(4, "1.00"))
    large = _writes(caplog, client, batch(40, "2.00"))

    assert len(large) == len(small), (small, large)
    assert len(large) <= 4, large  # the products created, those replaced, the events


@pytest.mark.slow
def test_two_batches_creating_the_same_skus_in_opposite_orders_both_succeed(
    app, client, database_url
):
    with live_server(database_url) as base:

        def send(items):
            with httpx.Client(base_url=base, headers=bearer(), timeout=120) as http:
                return http.post("/v3/products/batch", json={"products": items})

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            for round in range(3):
                batch = [_item(f"RACE-{round}-{n:04d}") for n in range(300)]
                answers = list(pool.map(send, [batch, batch[::-1]]))
                assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
                first, second = (a.json()["data"] for a in answers)
                assert first == second[::-1]  # the same products, each created once
    counted = client.get(
        "/v3/products", params={"sku[contains]": "RACE-"}, headers={"Prefer": "count=exact"}
    )
    assert counted.json()["meta"]["total"] == 900
