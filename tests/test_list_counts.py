"""A list's exact `total` is remembered while the tables it reads do not change, and an unchanged
list revalidated with its ETag is a 304 before any row is read (models/table_versions.py,
shopapi/web/counts.py). Every change is counted in the next list, from this process or another."""

import contextlib
import re

import httpx
import pytest

from models.db import database
from shopapi.web import counts
from tests.support.helpers import bearer, bearer_for, create_product, create_user, place_order
from tests.support.live import live_server

# The statements that read a listed table's rows (the page, or its count), as Peewee writes them.
_READS_ROWS = re.compile(r'FROM "(product|order|order_item|user)"')


@contextlib.contextmanager
def statements():
    """Every statement the app's database runs meanwhile, from any of its threads."""
    seen = []
    db = database.obj
    run = db.execute_sql

    def recorded(sql, params=None, *args, **kwargs):
        seen.append(sql)
        return run(sql, params, *args, **kwargs)

    db.execute_sql = recorded
    try:
        yield seen
    finally:
        del db.execute_sql


@pytest.fixture(autouse=True)
def every_count_remembered(monkeypatch):
    """These lists are a few rows long: remembered all the same, to test the remembering."""
    monkeypatch.setattr(counts, "REMEMBERED_FROM", 0)


def _total(client, url: str) -> int:
    response = client.get(url)
    assert response.status_code == 200, response.text
    return response.json()["meta"]["total"]


def test_create_delete_and_a_move_across_a_filter_are_counted_in_the_next_list(client):
    kept = [create_product(client, category="tea") for _ in range(2)]
    assert _total(client, "/v1/products?category=tea") == 2
    assert _total(client, "/v1/products?category=tea") == 2  # remembered, still right
    create_product(client, category="tea")
    assert _total(client, "/v1/products?category=tea") == 3
    assert client.delete(f"/v1/products/{kept[0]['id']}").status_code == 204
    assert _total(client, "/v1/products?category=tea") == 2
    assert _total(client, "/v1/products?category=coffee") == 0
    moved = client.patch(f"/v1/products/{kept[1]['id']}", json={"category": "coffee"})
    assert moved.status_code == 200
    assert _total(client, "/v1/products?category=tea") == 1
    assert _total(client, "/v1/products?category=coffee") == 1


@pytest.mark.parametrize("sort", ["-price.amount", "description", "-name,price.amount"])
def test_a_sorted_and_filtered_list_counts_the_rows_its_filter_keeps(client, sort):
    """A count runs the list's own statement with its ORDER BY cut off: whatever the sort (an
    amount computed in SQL, a column with missing values), it counts what the filter keeps."""
    for cents in (100, 250, 400, 900):
        create_product(client, category="sorted-count", price_cents=cents)
    filtered = {"category": "sorted-count", "price.amount[gte]": "2.5", "sort": sort}
    response = client.get("/v2/products", params=filtered)
    assert response.status_code == 200, response.text
    assert response.json()["meta"]["total"] == len(response.json()["data"]) == 3


def test_a_remembered_count_is_not_counted_again_until_the_table_changes(client):
    for _ in range(3):
        create_product(client, category="tea")
    assert _total(client, "/v1/products?category=tea&per_page=1") == 3
    with statements() as seen:
        assert _total(client, "/v1/products?category=tea&per_page=1") == 3
    assert not [sql for sql in seen if "COUNT(" in sql.upper()], seen
    create_product(client, category="tea")
    with statements() as seen:
        assert _total(client, "/v1/products?category=tea&per_page=1") == 4
    assert [sql for sql in seen if "COUNT(" in sql.upper()], seen


def test_a_short_count_is_counted_each_time_and_not_remembered(client, monkeypatch):
    """A customer's orders are one short list each: remembering them grew every worker's heap
    by one entry per customer, for almost no second use."""
    monkeypatch.setattr(counts, "REMEMBERED_FROM", 3)
    monkeypatch.setattr(counts, "remembered", counts._Remembered())
    for _ in range(2):
        create_product(client, category="tea")
    for _ in range(2):
        with statements() as seen:
            assert _total(client, "/v1/products?category=tea&per_page=1") == 2
        assert [sql for sql in seen if "COUNT(" in sql.upper()], seen
    assert len(counts.remembered) == 0
    create_product(client, category="tea")  # three: long enough to remember
    assert _total(client, "/v1/products?category=tea&per_page=1") == 3
    with statements() as seen:
        assert _total(client, "/v1/products?category=tea&per_page=1") == 3
    assert not [sql for sql in seen if "COUNT(" in sql.upper()], seen
    assert len(counts.remembered) == 1


def test_each_callers_count_is_its_own(client, app):
    alice, bob = create_user(client), create_user(client)
    product = create_product(client)
    place_order(client, alice, (product, 1))
    mine = app.test_client()
    mine.headers.update(bearer_for(alice))
    assert _total(client, "/v1/orders") == 1
    assert _total(mine, "/v1/orders") == 1
    place_order(client, bob, (product, 1))
    assert _total(client, "/v1/orders") == 2
    assert _total(mine, "/v1/orders") == 1


@pytest.mark.parametrize("url", ["/v1/products", "/v1/orders", "/v2/products?sort=-price.amount"])
def test_an_unchanged_list_revalidated_is_304_without_reading_its_rows(client, url):
    user, product = create_user(client), create_product(client)
    place_order(client, user, (product, 1))
    first = client.get(url)
    with statements() as seen:
        revalidated = client.get(url, headers={"If-None-Match": first.headers["etag"]})
    assert revalidated.status_code == 304
    assert revalidated.headers["etag"] == first.headers["etag"]
    assert not [sql for sql in seen if _READS_ROWS.search(sql)], seen
    # A change to what the list shows (an order's items too), and the same tag gets the new body.
    place_order(client, user, (product, 2))
    changed = client.get(url, headers={"If-None-Match": first.headers["etag"]})
    assert changed.status_code == 200
    assert changed.json() == client.get(url).json() != first.json()


def test_a_304_is_not_counted_against_the_rate_limit(client):
    create_product(client)
    first = client.get("/v1/products")
    remaining = int(first.headers["ratelimit-remaining"])
    for _ in range(3):
        revalidated = client.get("/v1/products", headers={"If-None-Match": first.headers["etag"]})
        assert revalidated.status_code == 304
        assert int(revalidated.headers["ratelimit-remaining"]) == remaining
    assert int(client.get("/v1/products").headers["ratelimit-remaining"]) == remaining - 1


@pytest.mark.slow
def test_another_process_counts_a_change_in_its_next_list(client, database_url):
    create_product(client, category="tea")
    with live_server(database_url) as base, httpx.Client(base_url=base, headers=bearer()) as other:
        assert _total(other, "/v1/products?category=tea") == 1
        tag = other.get("/v1/products?category=tea").headers["etag"]
        assert _total(client, "/v1/products?category=tea") == 1
        # Written here, counted there; written there, counted here.
        create_product(client, category="tea")
        assert _total(other, "/v1/products?category=tea") == 2
        revalidated = other.get("/v1/products?category=tea", headers={"If-None-Match": tag})
        assert revalidated.status_code == 200
        assert other.post("/v1/products", json=_product("tea")).status_code == 201
        assert _total(client, "/v1/products?category=tea") == 3
        assert _total(other, "/v1/products?category=tea") == 3


def _product(category: str) -> dict:
    return {"sku": "OTHER-1", "name": "Other", "price_cents": 100, "stock": 5, "category": category}
