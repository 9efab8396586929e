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


# Prefer: count= (RFC 7240), the way PostgREST offers it: exact by default; a client that shows
# no totals skips the count, or takes the planner's estimate.


def _page(client, query: str, prefer: str | None = None):
    headers = {"Prefer": prefer} if prefer is not None else {}
    response = client.get(f"/v1/products?{query}", headers=headers)
    assert response.status_code == 200, response.text
    return response


def test_count_none_leaves_the_total_out_and_still_links_the_next_page(client, products):
    first = _page(client, "page=1&per_page=3", "count=none")
    assert first.headers["preference-applied"] == "count=none"
    body = first.json()
    assert [p["id"] for p in body["data"]] == [p["id"] for p in products[:3]]
    assert {k: v for k, v in body["meta"].items() if k != "next_cursor"} == {
        "page": 1,
        "per_page": 3,
    }
    assert body["links"] == {
        "self": "/v1/products?page=1&per_page=3",
        "first": "/v1/products?page=1&per_page=3",
        "next": "/v1/products?page=2&per_page=3",
    }
    last = _page(client, "page=3&per_page=3", "count=none").json()
    assert [p["id"] for p in last["data"]] == [products[6]["id"]]
    assert set(last["links"]) == {"self", "first", "prev"}
    assert last["meta"]["next_cursor"] is None
    # Exactly full: no row follows, so no next page either.
    assert "next" not in _page(client, "page=1&per_page=7", "count=none").json()["links"]


def test_count_estimated_counts_a_short_list_exactly(client, products, database_url):
    response = _page(client, "per_page=3", "count=estimated")
    body = response.json()
    assert body["meta"]["total"] == 7
    assert body["meta"]["total_pages"] == 3
    # SQLite has no planner estimates: whatever was asked, it counts, and says so.
    counted = "estimated" if database_url.startswith("postgresql") else "exact"
    assert response.headers["preference-applied"] == f"count={counted}"


def test_count_planned_is_the_planners_estimate_on_postgresql(client, products, database_url):
    response = _page(client, "per_page=3&price_cents[gte]=0", 'count="planned"')
    body = response.json()
    if database_url.startswith("postgresql"):
        assert response.headers["preference-applied"] == "count=planned"
        assert isinstance(body["meta"]["total"], int) and body["meta"]["total"] >= 0
    else:
        assert response.headers["preference-applied"] == "count=exact"
        assert body["meta"]["total"] == 7
    # Whatever the estimate, `next` says whether rows follow.
    assert body["links"]["next"] == "/v1/products?per_page=3&price_cents%5Bgte%5D=0&page=2"
    assert [p["id"] for p in body["data"]] == [p["id"] for p in products[:3]]


@pytest.mark.parametrize("prefer", ["return=minimal", "count=all", "", "handling=lenient, wait=5"])
def test_other_preferences_are_ignored_and_the_count_is_exact(client, products, prefer):
    response = _page(client, "per_page=3", prefer)
    assert "preference-applied" not in response.headers
    assert response.json()["meta"]["total"] == 7


def test_a_count_preference_among_others_is_honoured(client, products):
    response = _page(client, "per_page=3", "return=minimal, count=none; x=1")
    assert response.headers["preference-applied"] == "count=none"
    assert "total" not in response.json()["meta"]


def test_cursor_pages_are_never_counted(client, products):
    cursor = _page(client, "per_page=3").json()["meta"]["next_cursor"]
    response = _page(client, f"per_page=3&cursor={cursor}", "count=exact")
    assert "preference-applied" not in response.headers
    assert "total" not in response.json()["meta"]
