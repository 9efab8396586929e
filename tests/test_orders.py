import logging

import pytest
from support.helpers import assert_problem, create_product, create_user, place_order


def stock_of(client, product):
    return client.get(f"/v1/products/{product['id']}").json()["stock"]


def test_placing_an_order_takes_stock_and_computes_the_total(client):
    user = create_user(client)
    mug = create_product(client, price_cents=1250, stock=5)
    tee = create_product(client, price_cents=1999, stock=2)
    response = place_order(client, user, (mug, 2), (tee, 1), note="Gift")
    assert response.status_code == 201
    order = response.json()
    assert response.headers["location"] == f"/v1/orders/{order['id']}"
    assert order["status"] == "pending"
    assert order["total_cents"] == 2 * 1250 + 1999
    assert order["currency"] == "EUR"
    assert order["items"] == [
        {"product_id": mug["id"], "quantity": 2, "unit_price_cents": 1250},
        {"product_id": tee["id"], "quantity": 1, "unit_price_cents": 1999},
    ]
    assert (stock_of(client, mug), stock_of(client, tee)) == (3, 1)


def test_short_stock_is_409_and_takes_nothing(client):
    user = create_user(client)
    plenty = create_product(client, stock=10)
    scarce = create_product(client, stock=1)
    assert_problem(place_order(client, user, (plenty, 3), (scarce, 2)), 409)
    assert (stock_of(client, plenty), stock_of(client, scarce)) == (10, 1)
    assert client.get("/v1/orders").json()["meta"]["total"] == 0


@pytest.mark.parametrize(
    ("change", "pointer"),
    [
        ({"user_id": 999999}, "/user_id"),
        ({"items": [{"product_id": 999999, "quantity": 1}]}, "/items/0/product_id"),
    ],
)
def test_unknown_user_or_product_is_422_pointing_at_the_field(client, change, pointer):
    user = create_user(client)
    product = create_product(client)
    body = {"user_id": user["id"], "items": [{"product_id": product["id"], "quantity": 1}]}
    problem = assert_problem(client.post("/v1/orders", json={**body, **change}), 422)
    assert problem["errors"][0]["pointer"] == pointer


def test_inactive_product_and_mixed_currencies_are_422(client):
    user = create_user(client)
    retired = create_product(client, active=False)
    assert_problem(place_order(client, user, (retired, 1)), 422)
    euro, dollar = create_product(client), create_product(client, currency="USD")
    assert_problem(place_order(client, user, (euro, 1), (dollar, 1)), 422)
    assert (stock_of(client, euro), stock_of(client, dollar)) == (10, 10)


def test_read_only_fields_in_an_order_are_400(client):
    user = create_user(client)
    product = create_product(client)
    body = {
        "user_id": user["id"],
        "items": [{"product_id": product["id"], "quantity": 1, "unit_price_cents": 1}],
        "total_cents": 1,
    }
    problem = assert_problem(client.post("/v1/orders", json=body), 400)
    assert {e["pointer"] for e in problem["errors"]} == {"", "/items/0/unit_price_cents"}


def test_the_status_follows_the_state_machine(client):
    user = create_user(client)
    order = place_order(client, user, (create_product(client), 1)).json()
    url = f"/v1/orders/{order['id']}"
    for status in ("paid", "shipped", "delivered"):
        response = client.patch(url, json={"status": status})
        assert response.status_code == 200, response.text
        assert response.json()["status"] == status
    body = assert_problem(client.patch(url, json={"status": "cancelled"}), 409)
    assert "delivered" in body["detail"]


@pytest.mark.parametrize(
    ("path", "forbidden"),
    [((), "shipped"), ((), "delivered"), (("paid",), "pending"), (("paid", "shipped"), "paid")],
)
def test_transitions_off_the_graph_are_409(client, path, forbidden):
    user = create_user(client)
    order = place_order(client, user, (create_product(client), 1)).json()
    url = f"/v1/orders/{order['id']}"
    for status in path:
        assert client.patch(url, json={"status": status}).status_code == 200
    assert_problem(client.patch(url, json={"status": forbidden}), 409)


@pytest.mark.parametrize("first", [(), ("paid",)])
def test_cancelling_gives_the_stock_back_once(client, first):
    user = create_user(client)
    product = create_product(client, stock=5)
    order = place_order(client, user, (product, 3)).json()
    url = f"/v1/orders/{order['id']}"
    for status in first:
        client.patch(url, json={"status": status})
    assert client.patch(url, json={"status": "cancelled"}).status_code == 200
    assert stock_of(client, product) == 5
    assert client.put(url, json={"status": "cancelled"}).status_code == 200  # no change
    assert stock_of(client, product) == 5


def test_stock_returned_by_a_cancel_saturates_at_the_maximum(client):
    """Found by the contract fuzzer: stock set to the maximum while an order held two units."""
    user = create_user(client)
    product = create_product(client, stock=5)
    order = place_order(client, user, (product, 2)).json()
    client.patch(f"/v1/products/{product['id']}", json={"stock": 2**31 - 1})
    response = client.patch(f"/v1/orders/{order['id']}", json={"status": "cancelled"})
    assert response.status_code == 200, response.text
    assert stock_of(client, product) == 2**31 - 1


def test_put_replaces_status_and_note(client):
    user = create_user(client)
    order = place_order(client, user, (create_product(client), 1), note="first").json()
    response = client.put(f"/v1/orders/{order['id']}", json={"status": "paid"})
    assert response.status_code == 200
    assert response.json()["status"] == "paid"
    assert response.json()["note"] is None
    items = {"items": [{"product_id": 1, "quantity": 1}], "status": "paid"}
    assert_problem(client.put(f"/v1/orders/{order['id']}", json=items), 400)


def test_only_finished_orders_can_be_deleted(client):
    user = create_user(client)
    product = create_product(client)
    order = place_order(client, user, (product, 1)).json()
    url = f"/v1/orders/{order['id']}"
    assert_problem(client.delete(url), 409)
    client.patch(url, json={"status": "cancelled"})
    assert client.delete(url).status_code == 204
    assert_problem(client.get(url), 404)
    # With no order left referring to it, the product can go too.
    assert client.delete(f"/v1/products/{product['id']}").status_code == 204


def test_an_ordered_product_cannot_be_deleted(client):
    user = create_user(client)
    product = create_product(client)
    place_order(client, user, (product, 1))
    body = assert_problem(client.delete(f"/v1/products/{product['id']}"), 409)
    assert "active" in body["detail"]


def _product_reads(caplog, action) -> int:
    """How many SELECTs of the product table `action` ran, as Peewee logs each statement."""
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="peewee"):
        action()
    statements = [str(r.msg[0]) for r in caplog.records if r.name == "peewee"]
    return sum(1 for sql in statements if sql.startswith("SELECT") and 'FROM "product"' in sql)


def test_an_order_reads_its_products_once_low_stock_included(client, caplog):
    # The low-stock check uses the rows the order read (and locked) to take their stock.
    user = create_user(client)
    mug, tee = create_product(client, stock=6), create_product(client, stock=50)

    def place():
        assert place_order(client, user, (mug, 4), (tee, 1)).status_code == 201

    assert _product_reads(caplog, place) == 1
    low = client.get("/v1/events", params={"type": "product.low_stock"}).json()["data"]
    assert [(e["resource_id"], e["data"]["stock"]) for e in low] == [(mug["id"], 2)]
    shown = client.get(f"/v1/products/{mug['id']}").json()
    assert low[0]["data"] == shown


def test_an_order_holds_its_products_rows_only_for_the_stock_and_its_items(client, caplog):
    """From its first product's stock taken (the row locked) to its commit, an order sends only
    the other stock updates (in product id order) and its items: its own row and its event are
    written before, so that other orders for those products wait as little as it can make them
    (each statement a round trip, long on a slow link to the database)."""
    user = create_user(client)
    mug, tee = create_product(client, stock=50), create_product(client, stock=50)
    with caplog.at_level(logging.DEBUG, logger="peewee"):
        assert place_order(client, user, (tee, 1), (mug, 2)).status_code == 201
    statements = [str(r.msg[0]) for r in caplog.records if r.name == "peewee"]
    first_taken = next(i for i, sql in enumerate(statements) if sql.startswith('UPDATE "product"'))
    held = [sql.split(" (")[0].split(" SET")[0] for sql in statements[first_taken:]]
    assert held == ['UPDATE "product"', 'UPDATE "product"', 'INSERT INTO "order_item"'], held
