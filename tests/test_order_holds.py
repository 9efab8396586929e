"""Stock hoarding: a pending order holds its stock for ORDER_HOLD_SECONDS, then expires
(`cancelled`, `cancellation_reason: expired`, the stock back once, `order.cancelled`), swept by
every server process and at once for an order that needs the stock; and a customer's pending
orders hold at most PENDING_QUANTITY_PER_PRODUCT_MAX of a product."""

import datetime

import httpx
import pytest
from support.helpers import (
    assert_problem,
    bearer,
    bearer_for,
    create_product,
    create_user,
    place_order,
    wait_for,
)
from support.live import live_server

from models import Order
from models.fields import utc_now


def _stock(client, product) -> int:
    return client.get(f"/v1/products/{product['id']}").json()["stock"]


def _placed_long_ago(order_id: int) -> None:
    """The order as if placed two hours ago: past any hold these tests set."""
    Order.update(created_at=utc_now() - datetime.timedelta(hours=2)).where(
        Order.id == order_id
    ).execute()


def _events_of(client, order_id: int) -> list[dict]:
    events = client.get("/v1/events", params={"per_page": 100}).json()["data"]
    return [e for e in events if e["data"]["id"] == order_id and e["type"].startswith("order.")]


@pytest.fixture
def capped(app_with):
    """An app whose customers' pending orders hold at most 3 of a product."""
    app = app_with(pending_quantity_per_product_max=3)
    admin = app.test_client()
    admin.headers.update(bearer())
    return app, admin


def test_a_customers_pending_orders_hold_at_most_the_cap_of_a_product(capped):
    app, admin = capped
    customer = create_user(admin)
    as_customer = app.test_client()
    as_customer.headers.update(bearer_for(customer))
    mug, tee = create_product(admin, stock=100), create_product(admin, stock=100)
    assert place_order(as_customer, customer, (mug, 2)).status_code == 201
    assert place_order(as_customer, customer, (mug, 1), (tee, 3)).status_code == 201

    over = assert_problem(place_order(as_customer, customer, (tee, 1), (mug, 1)), 409)
    assert f"at most 3 of product {mug['id']}" in over["detail"]
    assert "they hold 3 and this order asks for 1 more" in over["detail"]
    assert (_stock(admin, mug), _stock(admin, tee)) == (97, 97)  # nothing taken
    # Two lines of one product count together.
    assert_problem(place_order(as_customer, customer, (tee, 1), (tee, 1)), 409)

    # A paid order holds nothing any more; a cancelled one gave its stock back.
    first = as_customer.get("/v1/orders").json()["data"][0]
    assert admin.patch(f"/v1/orders/{first['id']}", json={"status": "paid"}).status_code == 200
    assert place_order(as_customer, customer, (mug, 2)).status_code == 201


def test_admins_and_partners_are_not_capped(capped):
    app, admin = capped
    partner = create_user(admin, role="partner")
    as_partner = app.test_client()
    as_partner.headers.update(bearer_for(partner))
    product = create_product(admin, stock=100)
    assert place_order(as_partner, partner, (product, 50)).status_code == 201
    assert place_order(admin, partner, (product, 50)).status_code == 201


def test_an_order_short_of_stock_expires_the_holds_past_their_time_first(client, app):
    hoarder, buyer = create_user(client), create_user(client)
    product = create_product(client, stock=5)
    hoarded = place_order(client, hoarder, (product, 5)).json()
    assert_problem(place_order(client, buyer, (product, 1)), 409)  # held, not yet expired

    _placed_long_ago(hoarded["id"])
    bought = place_order(client, buyer, (product, 2))

    assert bought.status_code == 201, bought.text
    expired = client.get(f"/v1/orders/{hoarded['id']}").json()
    assert (expired["status"], expired["cancellation_reason"]) == ("cancelled", "expired")
    assert _stock(client, product) == 3  # 5 back, 2 taken
    assert [e["type"] for e in _events_of(client, hoarded["id"])] == [
        "order.created",
        "order.cancelled",
    ]
    # Expired is final: paying it now is the state machine's 409, and gives nothing back twice.
    assert_problem(client.patch(f"/v1/orders/{hoarded['id']}", json={"status": "paid"}), 409)
    assert _stock(client, product) == 3


def test_a_cancel_by_request_says_so(client):
    user, product = create_user(client), create_product(client)
    order = place_order(client, user, (product, 1)).json()
    assert order["cancellation_reason"] is None
    cancelled = client.patch(f"/v1/orders/{order['id']}", json={"status": "cancelled"}).json()
    assert (cancelled["status"], cancelled["cancellation_reason"]) == ("cancelled", "requested")
    assert_problem(
        client.patch(f"/v1/orders/{order['id']}", json={"cancellation_reason": "expired"}), 400
    )


@pytest.mark.slow
def test_the_server_expires_overdue_orders_and_their_owner_sees_it(app, client, database_url):
    owner = create_user(client)
    product = create_product(client, stock=4)
    order = place_order(client, owner, (product, 4)).json()
    kept = place_order(client, owner, (create_product(client), 1)).json()
    _placed_long_ago(order["id"])
    settings = {"ORDER_HOLD_SECONDS": "3600", "ORDER_HOLD_SWEEP_SECONDS": "0.1"}
    with live_server(database_url, **settings) as base, httpx.Client(base_url=base) as http:
        as_owner = bearer_for(owner)

        def expired():
            shown = http.get(f"/v1/orders/{order['id']}", headers=as_owner).json()
            return shown if shown["status"] == "cancelled" else None

        shown = wait_for(expired, "the overdue order to expire")
        assert shown["cancellation_reason"] == "expired"
        v3 = http.get(f"/v3/orders/{order['id']}", headers=as_owner).json()
        assert (v3["status"], v3["cancellation_reason"]) == ("cancelled", "expired")
        assert http.get(f"/v1/orders/{kept['id']}", headers=as_owner).json()["status"] == "pending"
        assert http.get(f"/v1/products/{product['id']}", headers=as_owner).json()["stock"] == 4
        feed = http.get("/v1/events", headers=as_owner, params={"per_page": 100}).json()["data"]
        cancelled = [e for e in feed if e["type"] == "order.cancelled"]
        assert [e["data"]["id"] for e in cancelled] == [order["id"]]
        assert cancelled[0]["data"]["cancellation_reason"] == "expired"
