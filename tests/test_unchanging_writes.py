"""A write that changes nothing changes nothing: no new `updated_at`, no new ETag, no event, for
PUT and PATCH of every resource that has them."""

import pytest
from support.helpers import create_product, create_user, place_order


def _event_count(client) -> int:
    return len(client.get("/v1/events", params={"per_page": 100}).json()["data"])


def _assert_unchanged(client, url: str, method: str, body: dict, version: str = "v1"):
    before = client.get(url)
    events = _event_count(client)
    response = client.request(method, url, json=body)
    assert response.status_code == 200, response.text
    assert response.json()["updated_at"] == before.json()["updated_at"]
    after = client.get(url)
    assert after.headers["etag"] == before.headers["etag"]
    assert after.json() == before.json()
    assert _event_count(client) == events


PRODUCT_FIELDS = ("sku", "name", "description", "price_cents", "currency", "stock", "category")


@pytest.mark.parametrize("method", ["PATCH", "PUT"])
def test_a_product_written_with_its_own_values_is_unchanged(client, method):
    product = create_product(client, description="A mug", category="kitchen")
    body = {name: product[name] for name in (*PRODUCT_FIELDS, "active")}
    _assert_unchanged(client, f"/v1/products/{product['id']}", method, body)


def test_a_v2_product_patched_with_its_own_price_is_unchanged(client):
    product = create_product(client)
    url = f"/v2/products/{product['id']}"
    price = client.get(url).json()["price"]
    _assert_unchanged(client, url, "PATCH", {"price": price, "name": product["name"]})


def test_a_real_change_still_moves_updated_at_and_records_its_event(client):
    product = create_product(client)
    url = f"/v1/products/{product['id']}"
    events = _event_count(client)
    changed = client.patch(url, json={"name": "Another name"}).json()
    assert changed["updated_at"] != product["updated_at"]
    assert _event_count(client) == events + 1


@pytest.mark.parametrize("method", ["PATCH", "PUT"])
def test_a_user_written_with_their_own_values_is_unchanged(client, method):
    user = create_user(client, name="Grace")
    # The email in another case is the same email: emails are kept in one case.
    body = {"email": user["email"].upper(), "name": "Grace", "role": user["role"]}
    body["password"] = "correct horse"  # restated: the password it has
    _assert_unchanged(client, f"/v1/users/{user['id']}", method, body)


def test_an_order_set_to_its_own_status_and_note_is_unchanged(client):
    user = create_user(client)
    product = create_product(client, stock=5)
    order = place_order(client, user, (product, 1), note="leave at the door").json()
    url = f"/v1/orders/{order['id']}"
    _assert_unchanged(client, url, "PATCH", {"status": "pending", "note": "leave at the door"})
    _assert_unchanged(client, url, "PUT", {"status": "pending", "note": "leave at the door"})


def test_a_webhook_written_with_its_own_values_is_unchanged(client):
    body = {"url": "https://hooks.example.com/a", "events": ["order.created"], "description": "A"}
    webhook = client.post("/v1/webhooks", json=body).json()
    url = f"/v1/webhooks/{webhook['id']}"
    before = client.get(url).json()
    response = client.patch(url, json={**body, "enabled": True})
    assert response.status_code == 200
    assert response.json()["updated_at"] == before["updated_at"]
