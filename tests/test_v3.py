"""API v3: served beside v1 and v2 over the same data, money as in v2; chosen by path or Accept;
no /users/{id}/orders."""

import pytest
from support.helpers import assert_problem, bearer_for, create_product, create_user, place_order

V3 = {"Accept": "application/vnd.shopapi.v3+json"}


def _money(amount: str, currency: str = "EUR") -> dict:
    return {"amount": amount, "currency": currency}


def create_v3_product(client, **fields):
    body = {"sku": "MUG-001", "name": "Mug", "price": _money("12.50"), "stock": 10}
    response = client.post("/v3/products", json={**body, **fields})
    assert response.status_code == 201, response.text
    return response.json()


def test_v3_has_its_contract_and_docs(anonymous):
    spec = anonymous.get("/v3/openapi.json")
    assert spec.status_code == 200
    assert spec.json()["servers"] == [{"url": "/v3"}]
    assert spec.headers["api-version"] == "3"
    assert spec.headers["etag"]
    as_yaml = anonymous.get("/v3/openapi.yaml")
    assert as_yaml.status_code == 200
    assert as_yaml.headers["content-type"].startswith("application/yaml")
    zipped = anonymous.get("/v3/openapi.json", headers={"Accept-Encoding": "gzip"})
    assert zipped.headers["content-encoding"] == "gzip"
    assert anonymous.get("/v3/ui/").status_code == 200


def test_v3_shows_money_as_v2_does(client):
    product = create_v3_product(client, price=_money("1250", "JPY"))
    assert product["price"] == _money("1250", "JPY")
    assert "price_cents" not in product
    assert client.get(f"/v2/products/{product['id']}").json() == product
    assert client.get(f"/v1/products/{product['id']}").json()["price_cents"] == 1250


@pytest.mark.parametrize(
    "accept", ["application/vnd.shopapi.v3+json", "application/json; version=3"]
)
def test_accept_picks_v3_for_an_unversioned_path(client, accept):
    product = create_v3_product(client)
    unversioned = client.get(f"/products/{product['id']}", headers={"Accept": accept})
    assert unversioned.status_code == 200
    assert unversioned.headers["api-version"] == "3"
    assert unversioned.content == client.get(f"/v3/products/{product['id']}").content


def test_a_client_that_names_no_version_still_gets_v1(client):
    response = client.get("/products")
    assert response.headers["api-version"] == "1"
    assert client.get("/v3/products").headers["api-version"] == "3"


def test_users_orders_is_not_in_v3(client):
    user = create_user(client)
    product = create_product(client)
    assert place_order(client, user, (product, 1)).status_code == 201
    assert_problem(client.get(f"/v3/users/{user['id']}/orders"), 404)
    assert_problem(client.get(f"/users/{user['id']}/orders", headers=V3), 404)
    assert "/users/{id}/orders" not in client.get("/v3/openapi.json").json()["paths"]
    listed = client.get("/v3/orders", params={"user_id": user["id"]}).json()
    assert [order["user_id"] for order in listed["data"]] == [user["id"]]
    # v1 and v2 still have it.
    for version in (1, 2):
        assert client.get(f"/v{version}/users/{user['id']}/orders").status_code == 200


def test_a_customer_reaches_only_her_own_orders_in_v3(client, anonymous):
    alice, bob = create_user(client), create_user(client)
    product = create_product(client)
    order = place_order(client, bob, (product, 1)).json()
    as_alice = bearer_for(alice)
    assert_problem(anonymous.get(f"/v3/orders/{order['id']}", headers=as_alice), 404)
    assert anonymous.get("/v3/orders", headers=as_alice).json()["data"] == []
