import pytest
from support.helpers import assert_problem, create_product


def test_create_answers_201_with_location_and_defaults(client):
    response = client.post(
        "/v1/products", json={"sku": "MUG-001", "name": "Mug", "price_cents": 1250}
    )
    assert response.status_code == 201
    product = response.json()
    assert response.headers["location"] == f"/v1/products/{product['id']}"
    assert product["currency"] == "EUR"
    assert product["stock"] == 0
    assert product["active"] is True
    assert product["description"] is None and product["category"] is None
    assert product["created_at"].endswith("Z")
    assert client.get(response.headers["location"]).json() == product


def test_get_unknown_product_is_404(client):
    body = assert_problem(client.get("/v1/products/424242"), 404)
    assert body["instance"] == "/v1/products/424242"


def test_duplicate_sku_is_409_naming_the_field(client):
    create_product(client, sku="DUP-1")
    body = assert_problem(
        client.post("/v1/products", json={"sku": "DUP-1", "name": "Again", "price_cents": 1}), 409
    )
    assert "sku" in body["detail"]


def test_put_replaces_every_writable_field(client):
    product = create_product(client, description="old", category="kitchen", stock=7)
    response = client.put(
        f"/v1/products/{product['id']}", json={"sku": "NEW-1", "name": "New", "price_cents": 5}
    )
    assert response.status_code == 200
    replaced = response.json()
    assert replaced["sku"] == "NEW-1"
    assert replaced["description"] is None and replaced["category"] is None
    assert replaced["stock"] == 0
    assert replaced["created_at"] == product["created_at"]
    assert replaced["updated_at"] > product["updated_at"]


def test_merge_patch_changes_only_the_fields_sent_and_null_clears(client):
    product = create_product(client, description="text", category="books")
    response = client.patch(
        f"/v1/products/{product['id']}",
        content=b'{"name": "Renamed", "description": null}',
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert response.status_code == 200
    patched = response.json()
    assert patched["name"] == "Renamed"
    assert patched["description"] is None
    assert patched["category"] == "books"
    assert patched["price_cents"] == product["price_cents"]


def test_patch_with_plain_json_is_accepted_too(client):
    product = create_product(client)
    response = client.patch(f"/v1/products/{product['id']}", json={"stock": 3})
    assert response.status_code == 200
    assert response.json()["stock"] == 3


def test_patch_null_on_a_required_field_is_400(client):
    product = create_product(client)
    body = assert_problem(client.patch(f"/v1/products/{product['id']}", json={"name": None}), 400)
    assert body["errors"][0]["pointer"] == "/name"


def test_delete_answers_204_then_404(client):
    product = create_product(client)
    response = client.delete(f"/v1/products/{product['id']}")
    assert response.status_code == 204
    assert response.content == b""
    assert_problem(client.get(f"/v1/products/{product['id']}"), 404)
    assert_problem(client.delete(f"/v1/products/{product['id']}"), 404)


@pytest.mark.parametrize("version", ["v1", "v2", "v3"])
def test_a_204_has_no_content_type(client, version):
    """No content has no media type: a client that reads Content-Type must not take an empty
    204 for a problem document."""
    product = create_product(client)
    response = client.delete(f"/{version}/products/{product['id']}")
    assert response.status_code == 204
    assert "content-type" not in response.headers
    webhook = client.post(
        f"/{version}/webhooks",
        json={"url": "https://example.com/hook", "events": ["order.created"]},
    )
    response = client.delete(f"/{version}/webhooks/{webhook.json()['id']}")
    assert response.status_code == 204
    assert "content-type" not in response.headers


def test_a_deleted_products_id_is_never_given_to_another(client):
    first = create_product(client)
    newest = create_product(client)
    assert client.delete(f"/v1/products/{newest['id']}").status_code == 204
    after = create_product(client)
    assert after["id"] > newest["id"]
    assert client.get(f"/v1/products/{newest['id']}").status_code == 404
    assert client.get(f"/v1/products/{first['id']}").json()["sku"] == first["sku"]


def test_a_sku_with_a_trailing_newline_is_400(client):
    """`^[A-Z0-9-]{3,32}$` is ECMA-262's: `$` is the value's end, not before a final newline."""
    response = client.post(
        "/v1/products", json={"sku": "MUG-001\n", "name": "Mug", "price_cents": 1}
    )
    body = assert_problem(response, 400)
    assert [e["pointer"] for e in body["errors"]] == ["/sku"]
    assert client.get("/v1/products").json()["data"] == []
