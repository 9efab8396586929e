"""The outbox and its feed: each change writes its event in its own transaction, and
`GET /v1/events` shows each caller the events of what it may read, page by page."""

import contextlib

import peewee
import pytest
from support.helpers import (
    assert_problem,
    bearer,
    bearer_for,
    create_product,
    create_user,
    place_order,
)

from models.db import database


def events(client, **params) -> list[dict]:
    response = client.get("/v1/events", params={"per_page": 100, **params})
    assert response.status_code == 200, response.text
    return response.json()["data"]


def types_of(client, **params) -> list[str]:
    return [event["type"] for event in events(client, **params)]


def test_each_change_writes_its_event_with_the_resource_and_who_did_it(client):
    customer = create_user(client)
    mug = create_product(client, price_cents=1250, stock=10)
    order = place_order(client, customer, (mug, 1)).json()
    client.patch(f"/v1/orders/{order['id']}", json={"status": "paid"})
    client.patch(f"/v1/orders/{order['id']}", json={"status": "cancelled"})
    client.patch(f"/v1/products/{mug['id']}", json={"name": "Big mug"})

    feed = events(client)
    assert [e["type"] for e in feed] == [
        "user.created",
        "product.created",
        "order.created",
        "order.status_changed",
        "order.cancelled",
        "product.updated",
    ]
    assert [e["id"] for e in feed] == sorted(e["id"] for e in feed)
    created = feed[2]
    assert created["resource_type"] == "order"
    assert created["resource_id"] == order["id"]
    assert created["data"] == order  # the resource as a GET just after the change showed it
    assert created["actor_subject"] == "client:tests"
    assert created["actor_user_id"] is None
    assert created["occurred_at"].endswith("Z")
    assert feed[3]["data"]["status"] == "paid"
    assert feed[4]["data"]["status"] == "cancelled"
    assert feed[5]["data"]["name"] == "Big mug"
    assert client.get(f"/v1/events/{created['id']}").json() == created


def test_a_change_made_by_a_user_names_them(client, anonymous):
    customer = create_user(client)
    mug = create_product(client)
    as_customer = {**bearer_for(customer)}
    order = anonymous.post(
        "/v1/orders",
        json={"user_id": customer["id"], "items": [{"product_id": mug["id"], "quantity": 1}]},
        headers=as_customer,
    )
    assert order.status_code == 201, order.text
    (event,) = events(client, type="order.created")
    assert (event["actor_subject"], event["actor_user_id"]) == (str(customer["id"]), customer["id"])


def test_stock_falling_below_the_threshold_is_low_stock_once(client):
    customer = create_user(client)
    mug = create_product(client, stock=8)
    place_order(client, customer, (mug, 2))  # 6: not below 5
    assert types_of(client, type="product.low_stock") == []
    place_order(client, customer, (mug, 2))  # 4: below
    place_order(client, customer, (mug, 1))  # 3: already below, not a new fall
    (low,) = events(client, type="product.low_stock")
    assert (low["resource_id"], low["data"]["stock"]) == (mug["id"], 4)

    client.patch(f"/v1/products/{mug['id']}", json={"stock": 20})
    client.patch(f"/v1/products/{mug['id']}", json={"stock": 1})  # a PATCH can make it fall too
    lows = events(client, type="product.low_stock")
    assert [e["data"]["stock"] for e in lows] == [4, 1]


def test_the_threshold_is_configurable(app_with):
    client = app_with(low_stock_threshold=100).test_client()
    client.headers.update(bearer())
    mug = create_product(client, stock=150)
    client.patch(f"/v1/products/{mug['id']}", json={"stock": 99})
    assert types_of(client, type="product.low_stock") == ["product.low_stock"]


def test_a_refused_change_leaves_no_event(client):
    customer = create_user(client)
    mug = create_product(client, stock=1)
    before = types_of(client)
    assert_problem(place_order(client, customer, (mug, 2)), 409)  # short of stock
    assert_problem(client.patch(f"/v1/products/{mug['id']}", json={"sku": "x"}), 400)
    order = place_order(client, customer, (mug, 1)).json()
    client.patch(f"/v1/orders/{order['id']}", json={"note": "only a note"})  # no status change
    assert_problem(client.patch(f"/v1/orders/{order['id']}", json={"status": "shipped"}), 409)
    # 1 -> 0 is no fall below 5: the product was already below.
    assert types_of(client) == [*before, "order.created"]


@contextlib.contextmanager
def _events_of_type_refused(event_type: str):
    """The database refuses to store events of `event_type`, as if it failed right there."""
    if isinstance(database.obj, peewee.SqliteDatabase):
        database.execute_sql(
            "CREATE TRIGGER refuse_event BEFORE INSERT ON event"
            f" WHEN NEW.type = '{event_type}' BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )
        undo = "DROP TRIGGER refuse_event"
    else:
        database.execute_sql(
            f"ALTER TABLE event ADD CONSTRAINT refuse_event CHECK (type <> '{event_type}')"
        )
        undo = "ALTER TABLE event DROP CONSTRAINT refuse_event"
    try:
        yield
    finally:
        database.execute_sql(undo)
        database.close()


def test_an_order_rolled_back_after_its_event_was_written_leaves_no_event(client):
    customer = create_user(client)
    mug = create_product(client, stock=6)
    before = events(client)
    # order.created is written, then product.low_stock (6 -> 2) fails: all of it rolls back.
    with _events_of_type_refused("product.low_stock"):
        response = place_order(client, customer, (mug, 4))
    assert response.status_code >= 400
    assert response.headers["content-type"] == "application/problem+json"
    assert events(client) == before
    assert client.get("/v1/orders").json()["data"] == []
    assert client.get(f"/v1/products/{mug['id']}").json()["stock"] == 6


def test_a_change_whose_event_cannot_be_written_does_not_happen(client):
    with _events_of_type_refused("product.created"):
        response = client.post(
            "/v1/products", json={"sku": "MUG-1", "name": "Mug", "price_cents": 100}
        )
    assert response.status_code >= 400
    assert client.get("/v1/products").json()["data"] == []
    assert events(client) == []


def test_the_feed_pages_by_cursor_without_gaps_or_repeats(client):
    for _ in range(7):
        create_product(client)
    seen, params = [], {"per_page": 3}
    while True:
        page = client.get("/v1/events", params=params).json()
        seen += [event["id"] for event in page["data"]]
        if page["meta"]["next_cursor"] is None:
            break
        create_product(client)  # events keep arriving while a client catches up
        params = {"per_page": 3, "cursor": page["meta"]["next_cursor"]}
    assert seen == sorted(set(seen))
    assert len(seen) >= 7
    assert [e["id"] for e in events(client, **{"id[gt]": seen[-1]})] == [
        e["id"] for e in events(client) if e["id"] > seen[-1]
    ]


def test_the_feed_filters_by_type_and_resource(client):
    customer = create_user(client)
    mug, tee = create_product(client), create_product(client)
    client.patch(f"/v1/products/{mug['id']}", json={"name": "Mug 2"})
    place_order(client, customer, (tee, 1))
    of_mug = events(client, resource_type="product", resource_id=mug["id"])
    assert [e["type"] for e in of_mug] == ["product.created", "product.updated"]
    assert types_of(client, **{"type[in]": "order.created,user.created"}) == [
        "user.created",
        "order.created",
    ]
    assert_problem(client.get("/v1/events", params={"type": "order.shipped"}), 400)
    assert_problem(client.get("/v1/events", params={"data": "x"}), 400)


def test_a_customer_sees_the_catalogue_and_their_own_things_only(client, anonymous):
    alice, bob = create_user(client), create_user(client)
    mug = create_product(client)
    place_order(client, alice, (mug, 1))
    bobs = place_order(client, bob, (mug, 1)).json()

    def feed(headers):
        response = anonymous.get("/v1/events", headers=headers)
        assert response.status_code == 200, response.text
        return [(e["type"], e["resource_id"]) for e in response.json()["data"]]

    as_alice = bearer_for(alice)
    assert feed(as_alice) == [
        ("user.created", alice["id"]),
        ("product.created", mug["id"]),
        ("order.created", 1),
    ]
    bobs_event = events(client, type="order.created", resource_id=bobs["id"])[0]
    assert_problem(anonymous.get(f"/v1/events/{bobs_event['id']}", headers=as_alice), 404)
    # Fewer scopes, fewer events: a token for orders only sees no catalogue or user record.
    assert feed(bearer(str(alice["id"]), ["orders:read"])) == [("order.created", 1)]
    assert feed(bearer(str(alice["id"]), ["webhooks"])) == []
    assert len(feed(bearer())) == 5  # an admin sees everything
    assert_problem(anonymous.get("/v1/events"), 401)


@pytest.mark.parametrize("spelling", ["/v2/events", "/events"])
def test_version_2_shows_the_snapshot_in_its_representation(client, spelling):
    create_product(client, price_cents=1250, currency="EUR")
    headers = {"Accept": "application/vnd.shopapi.v2+json"}
    (event,) = client.get(spelling, headers=headers).json()["data"]
    assert event["data"]["price"] == {"amount": "12.50", "currency": "EUR"}
    assert "price_cents" not in event["data"]


def test_only_an_admin_sees_who_acted(client, anonymous):
    partner, customer = create_user(client, role="partner"), create_user(client)
    as_partner, as_customer = bearer_for(partner), bearer_for(customer)
    product = {"sku": "MUG-1", "name": "Mug", "price_cents": 100, "stock": 10}
    mug = anonymous.post("/v1/products", json=product, headers=as_partner).json()
    place_order(client, customer, (mug, 1))  # the customer's order, placed by staff
    actors = {
        e["type"]: (e["actor_subject"], e["actor_user_id"])
        for e in events(client, **{"type[in]": "product.created,order.created"})
    }
    assert actors == {
        "product.created": (str(partner["id"]), partner["id"]),
        "order.created": ("client:tests", None),
    }

    # Anyone else gets an empty subject and no user: in the feed, an event, and in v2.
    hidden = ("", None)
    for caller in (as_partner, as_customer, bearer(str(customer["id"]), ["products:read"])):
        shown = []
        for path in ("/v1/events", "/v2/events"):
            page = anonymous.get(path, headers=caller)
            assert page.status_code == 200, page.text
            for event in page.json()["data"]:
                one = anonymous.get(f"/v1/events/{event['id']}", headers=caller).json()
                shown += [event, one]
        assert {e["type"] for e in shown} >= {"product.created"}
        assert {(e["actor_subject"], e["actor_user_id"]) for e in shown} == {hidden}

    # Nor can they ask who acted by filtering or sorting on it.
    asking = [
        ({"actor_user_id": partner["id"]}, "actor_user_id"),
        ({"actor_user_id[ne]": "null"}, "actor_user_id[ne]"),
        ({"actor_subject[contains]": "client"}, "actor_subject[contains]"),
        ({"actor_subject[in]": "1,2,3"}, "actor_subject[in]"),
        ({"sort": "id,-actor_subject"}, "sort"),
    ]
    for params, parameter in asking:
        refused = assert_problem(
            anonymous.get("/v1/events", params=params, headers=as_partner), 403
        )
        assert parameter in refused["detail"]
        assert client.get("/v1/events", params=params).status_code == 200
    mine = anonymous.get("/v1/events", params={"fields": "id,actor_subject"}, headers=as_partner)
    assert {e["actor_subject"] for e in mine.json()["data"]} == {""}
