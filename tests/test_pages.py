import pytest
from support.helpers import create_product


@pytest.fixture
def products(client):
    return [create_product(client) for _ in range(7)]


def test_default_page_is_the_first_twenty_by_id(client, products):
    response = client.get("/v1/products")
    assert response.status_code == 200
    body = response.json()
    assert [p["id"] for p in body["data"]] == [p["id"] for p in products]
    assert body["meta"] == {
        "page": 1,
        "per_page": 20,
        "total": 7,
        "total_pages": 1,
        "next_cursor": None,
    }
    assert set(body["links"]) == {"self", "first", "last"}


def test_middle_page_links_every_neighbour(client, products):
    response = client.get("/v1/products?page=2&per_page=3")
    body = response.json()
    assert [p["id"] for p in body["data"]] == [p["id"] for p in products[3:6]]
    cursor = body["meta"].pop("next_cursor")
    assert body["meta"] == {"page": 2, "per_page": 3, "total": 7, "total_pages": 3}
    after = client.get(f"/v1/products?per_page=3&cursor={cursor}").json()
    assert after["data"] == client.get("/v1/products?page=3&per_page=3").json()["data"]
    assert body["links"] == {
        "self": "/v1/products?page=2&per_page=3",
        "first": "/v1/products?page=1&per_page=3",
        "prev": "/v1/products?page=1&per_page=3",
        "next": "/v1/products?page=3&per_page=3",
        "last": "/v1/products?page=3&per_page=3",
    }
    assert response.headers["link"] == (
        '</v1/products?page=1&per_page=3>; rel="first", '
        '</v1/products?page=1&per_page=3>; rel="prev", '
        '</v1/products?page=3&per_page=3>; rel="next", '
        '</v1/products?page=3&per_page=3>; rel="last"'
    )


def test_a_page_past_the_end_is_empty_and_points_back(client, products):
    body = client.get("/v1/products?page=9&per_page=3").json()
    assert body["data"] == []
    assert "next" not in body["links"]
    assert body["links"]["prev"] == "/v1/products?page=3&per_page=3"


def test_an_empty_collection_has_one_empty_page(client):
    body = client.get("/v1/users").json()
    assert body["data"] == []
    assert body["meta"] == {
        "page": 1,
        "per_page": 20,
        "total": 0,
        "total_pages": 0,
        "next_cursor": None,
    }
    assert body["links"]["last"] == "/v1/users?page=1"


@pytest.mark.parametrize("query", ["per_page=0", "per_page=101", "page=0", "page=-1", "page=x"])
def test_out_of_bounds_paging_is_400_naming_the_parameter(client, query):
    response = client.get(f"/v1/orders?{query}")
    assert response.status_code == 400
    assert response.json()["errors"][0]["parameter"] == query.split("=")[0]
