"""API v3: served beside v1 and v2 over the same data, money as in v2; chosen by path or Accept;
no /users/{id}/orders."""

import logging
import re

import pytest
from support.helpers import (
    assert_problem,
    bearer,
    bearer_for,
    create_product,
    create_user,
    place_order,
)

from models import Product
from models.db import database, is_postgresql

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
    v2 = client.get(f"/v2/products/{product['id']}").json()
    assert v2 == {name: product[name] for name in v2}  # and v3 shows fields of its own
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


def _rels(response) -> set[str]:
    return {part.split('rel="')[1].rstrip('"') for part in response.headers["link"].split(", ")}


@pytest.mark.parametrize("path", ["/v3/products", "/v3/users", "/v3/orders", "/v3/events"])
def test_a_v3_list_counts_nothing_unless_asked(client, path):
    for _ in range(3):
        user = create_user(client)
        assert place_order(client, user, (create_product(client), 1)).status_code == 201
    first = client.get(path, params={"per_page": 2})
    body = first.json()
    assert first.status_code == 200
    assert set(body["meta"]) == {"page", "per_page", "next_cursor"}
    assert set(body["links"]) == {"self", "first", "next"}
    assert _rels(first) == {"first", "next"}
    assert "preference-applied" not in first.headers
    # Following `next` to the end: no `next` exactly when no more rows follow.
    page, seen = first, list(body["data"])
    while "next" in page.json()["links"]:
        page = client.get(page.json()["links"]["next"])
        assert "total" not in page.json()["meta"] and "last" not in page.json()["links"]
        seen += page.json()["data"]
    assert "next" not in _rels(page)
    everything = client.get(path, params={"per_page": 100})
    assert seen == everything.json()["data"]
    # Asked for, the count is there as in v1.
    counted = client.get(path, params={"per_page": 2}, headers={"Prefer": "count=exact"})
    total = len(everything.json()["data"])
    assert counted.json()["meta"]["total"] == total
    assert counted.json()["meta"]["total_pages"] == -(-total // 2)
    assert "last" in counted.json()["links"]
    assert counted.headers["preference-applied"] == "count=exact"


def test_a_list_that_exactly_fills_its_page_has_no_next(client):
    for _ in range(4):
        create_product(client)
    full = client.get("/v3/products", params={"per_page": 4})
    assert len(full.json()["data"]) == 4
    assert "next" not in full.json()["links"] and full.json()["meta"]["next_cursor"] is None
    past = client.get("/v3/products", params={"per_page": 4, "page": 2})
    assert past.json()["data"] == [] and "next" not in past.json()["links"]
    assert past.json()["links"]["prev"].endswith("page=1")


@pytest.mark.parametrize("count", ["planned", "estimated", "none"])
def test_other_count_preferences_are_applied_in_v3(client, database_url, count):
    for _ in range(3):
        create_product(client)
    response = client.get("/v3/products", headers={"Prefer": f"count={count}"})
    applied = "exact" if count != "none" and database_url.startswith("sqlite") else count
    assert response.headers["preference-applied"] == f"count={applied}"
    assert ("total" in response.json()["meta"]) == (count != "none")


def test_v1_and_v2_lists_still_count_by_default(client):
    create_product(client)
    for version in (1, 2):
        body = client.get(f"/v{version}/products").json()
        assert body["meta"]["total"] == 1 and "last" in body["links"]


def test_cursor_pages_walk_a_v3_list(client):
    made = [create_product(client)["id"] for _ in range(5)]
    page = client.get("/v3/products", params={"per_page": 2}).json()
    seen = [p["id"] for p in page["data"]]
    while page["meta"]["next_cursor"]:
        cursor = page["meta"]["next_cursor"]
        page = client.get("/v3/products", params={"per_page": 2, "cursor": cursor}).json()
        seen += [p["id"] for p in page["data"]]
    assert seen == made


def test_the_v3_contract_says_lists_count_only_when_asked(anonymous):
    v1, v3 = (anonymous.get(f"/v{n}/openapi.json").json() for n in (1, 3))
    assert "x-replaces-components" not in v3
    prefer = v3["components"]["parameters"]["Prefer"]["description"]
    assert "counts only when asked" in prefer
    assert "also without this header" in v1["components"]["parameters"]["Prefer"]["description"]
    # Every v3 list refers to v3's Prefer, those taken from v1 and v2 included.
    for path in ("/users", "/products", "/events", "/webhooks"):
        refs = [p.get("$ref") for p in v3["paths"][path]["get"]["parameters"]]
        assert "#/components/parameters/Prefer" in refs, path


def _orders_of_three_users(client, count: int) -> list[dict]:
    users = [create_user(client) for _ in range(3)]
    products = [create_product(client) for _ in range(4)]
    orders = []
    for n in range(count):
        lines = [(products[n % 4], 1), (products[(n + 1) % 4], 2)]
        orders.append(place_order(client, users[n % 3], *lines).json())
    return orders


@pytest.mark.parametrize("query", ["expand=user,items.product", "expand=user&expand=items.product"])
def test_an_order_brings_its_user_and_products_when_asked(client, query):
    order = _orders_of_three_users(client, 1)[0]
    plain = client.get(f"/v3/orders/{order['id']}").json()
    assert "user" not in plain and all("product" not in item for item in plain["items"])
    expanded = client.get(f"/v3/orders/{order['id']}?{query}")
    assert expanded.status_code == 200, expanded.text
    body = expanded.json()
    assert body["user"] == client.get(f"/v3/users/{order['user_id']}").json()
    for item in body["items"]:
        assert item["product"] == client.get(f"/v3/products/{item['product_id']}").json()
        assert item["product"]["price"]["currency"] == "EUR"  # v3's product: money as v2
    assert {k: v for k, v in body.items() if k != "user"} | {"items": plain["items"]} == plain
    listed = client.get(f"/v3/orders?{query}").json()["data"]
    assert listed == [body]


@pytest.mark.parametrize(
    ("expand", "change"),
    [
        (
            "user",
            lambda client, order: client.patch(
                f"/v3/users/{order['user_id']}", json={"name": "New"}
            ),
        ),
        (
            "items.product",
            lambda client, order: client.patch(
                f"/v3/products/{order['items'][0]['product_id']}", json={"name": "Renamed"}
            ),
        ),
    ],
)
def test_an_expanded_list_is_revalidated_against_what_it_expanded(client, expand, change):
    """A list's ETag follows every table its body shows: the user or product it expanded too."""
    order = _orders_of_three_users(client, 1)[0]
    url = f"/v3/orders?expand={expand}"
    tag = client.get(url).headers["etag"]
    assert client.get(url, headers={"If-None-Match": tag}).status_code == 304
    assert change(client, order).status_code == 200
    again = client.get(url, headers={"If-None-Match": tag})
    assert again.status_code == 200
    assert again.headers["etag"] != tag


def test_one_expansion_alone_and_with_fields(client):
    order = _orders_of_three_users(client, 1)[0]
    only_user = client.get(f"/v3/orders/{order['id']}", params={"expand": "user"}).json()
    assert "user" in only_user and all("product" not in i for i in only_user["items"])
    listed = client.get("/v3/orders", params={"expand": "user", "fields": "id"}).json()["data"]
    assert set(listed[0]) == {"id", "user"}


@pytest.mark.parametrize("expand", ["users", "items", "user,product", "items.product.user"])
def test_an_unknown_expansion_is_a_400_naming_expand(client, expand):
    order = _orders_of_three_users(client, 1)[0]
    for path in ("/v3/orders", f"/v3/orders/{order['id']}"):
        body = assert_problem(client.get(path, params={"expand": expand}), 400)
        assert "expand" in str(body)


def test_expansion_is_not_in_v1_or_v2(client):
    order = _orders_of_three_users(client, 1)[0]
    for version in (1, 2):
        assert_problem(client.get(f"/v{version}/orders/{order['id']}?expand=user"), 400)


def test_a_customer_expands_only_what_she_sees(client, anonymous):
    alice = create_user(client)
    _orders_of_three_users(client, 3)
    product = create_product(client)
    mine = place_order(client, alice, (product, 1)).json()
    as_alice = bearer_for(alice)
    listed = anonymous.get("/v3/orders?expand=user,items.product", headers=as_alice).json()
    assert [o["id"] for o in listed["data"]] == [mine["id"]]
    assert listed["data"][0]["user"]["id"] == alice["id"]


def test_expansion_takes_the_scope_of_what_it_brings(client, anonymous):
    order = _orders_of_three_users(client, 1)[0]

    only_orders = bearer(str(order["user_id"]), ["orders:read"])
    url = f"/v3/orders/{order['id']}"
    assert anonymous.get(url, headers=only_orders).status_code == 200
    assert_problem(anonymous.get(f"{url}?expand=user", headers=only_orders), 403)
    assert_problem(anonymous.get(f"{url}?expand=items.product", headers=only_orders), 403)


def _statements(caplog, action) -> list[str]:
    """The SQL statements `action` ran, as Peewee logs each one it executes."""
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="peewee"):
        action()
    return [str(record.msg[0]) for record in caplog.records if record.name == "peewee"]


def _reads_of(statements: list[str], table: str) -> int:
    return sum(1 for sql in statements if sql.startswith("SELECT") and f'FROM "{table}"' in sql)


def test_a_page_of_expanded_orders_costs_one_query_per_relation(client, caplog):
    _orders_of_three_users(client, 12)
    url = "/v3/orders?expand=user,items.product&per_page="

    def page(size):
        return lambda: client.get(url + str(size)).raise_for_status()

    small, large = _statements(caplog, page(2)), _statements(caplog, page(12))
    assert _reads_of(large, "user") == _reads_of(small, "user") == 1
    assert _reads_of(large, "product") == _reads_of(small, "product") == 1
    assert _reads_of(large, "order_item") == _reads_of(small, "order_item") == 1
    assert len(large) == len(small)


def _item(sku: str, amount: str = "9.90", **fields) -> dict:
    return {"sku": sku, "name": f"Product {sku}", "price": _money(amount), "stock": 5, **fields}


def _events(client) -> list[tuple[str, int]]:
    events = client.get("/v3/events", params={"per_page": 100}).json()["data"]
    return [(event["type"], event["data"]["id"]) for event in events]


def test_a_batch_creates_and_replaces_products_by_sku(client):
    existing = create_v3_product(client, sku="OLD-1", price=_money("1.00"))
    unchanged = create_v3_product(client, sku="SAME-1", price=_money("2.00"), stock=3)
    same = {k: unchanged[k] for k in ("sku", "name", "description", "price", "stock")}
    same |= {"category": unchanged["category"], "active": unchanged["active"]}
    before = _events(client)
    batch = [
        _item("NEW-1"),
        _item("OLD-1", "4.50", stock=7),
        same,
        _item("NEW-2", "300"),
    ]
    batch[3]["price"] = _money("300", "JPY")
    response = client.post("/v3/products/batch", json={"products": batch})
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert [p["sku"] for p in data] == ["NEW-1", "OLD-1", "SAME-1", "NEW-2"]
    assert data[1]["id"] == existing["id"] and data[1]["price"] == _money("4.50")
    assert data[2] == unchanged  # equal to what is stored: untouched
    assert data[3]["price"] == _money("300", "JPY")
    for product in data:
        assert client.get(f"/v3/products/{product['id']}").json() == product
    # An event for each product really created or changed, none for the unchanged one.
    assert sorted(_events(client)[len(before) :]) == sorted(
        [
            ("product.created", data[0]["id"]),
            ("product.updated", existing["id"]),
            ("product.created", data[3]["id"]),
        ]
    )


@pytest.mark.parametrize(
    "bad, status, pointer",
    [
        ({"price": _money("1.234")}, 422, "/products/2/price/amount"),
        ({"price": {"amount": "ten", "currency": "EUR"}}, 400, "/products/2/price/amount"),
        ({"name": ""}, 400, "/products/2/name"),
        ({"id": 5}, 400, "/products/2/id"),
        ({"sku": "NEW-1"}, 422, "/products/2/sku"),  # the SKU of /products/0 again
    ],
)
def test_a_bad_item_changes_nothing_and_is_pointed_at(client, bad, status, pointer):
    existing = create_v3_product(client, sku="OLD-1", price=_money("1.00"))
    before = _events(client)
    batch = [_item("NEW-1"), _item("OLD-1", "4.50"), {**_item("NEW-2"), **bad}]
    body = assert_problem(client.post("/v3/products/batch", json={"products": batch}), status)
    assert pointer in [error.get("pointer") for error in body["errors"]], body
    assert client.get(f"/v3/products/{existing['id']}").json() == existing
    assert client.get("/v3/products", params={"sku[in]": "NEW-1,NEW-2"}).json()["data"] == []
    assert _events(client) == before


def test_a_batch_holds_one_to_a_thousand_products(client):
    assert_problem(client.post("/v3/products/batch", json={"products": []}), 400)
    too_many = [_item(f"MANY-{n}") for n in range(1001)]
    assert_problem(client.post("/v3/products/batch", json={"products": too_many}), 400)
    thousand = [_item(f"MANY-{n}") for n in range(1000)]
    response = client.post("/v3/products/batch", json={"products": thousand})
    assert response.status_code == 200, response.text
    assert len(response.json()["data"]) == 1000
    counted = client.get("/v3/products", headers={"Prefer": "count=exact"}).json()
    assert counted["meta"]["total"] == 1000


def test_a_batch_takes_products_write_and_an_idempotency_key(client, anonymous):
    customer = create_user(client)
    body = {"products": [_item("IDEM-1")]}
    assert_problem(anonymous.post("/v3/products/batch", json=body), 401)
    forbidden = anonymous.post("/v3/products/batch", json=body, headers=bearer_for(customer))
    assert_problem(forbidden, 403)
    key = {"Idempotency-Key": "batch-key-1"}
    first = client.post("/v3/products/batch", json=body, headers=key)
    again = client.post("/v3/products/batch", json=body, headers=key)
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert again.headers["idempotent-replayed"] == "true"
    other = client.post("/v3/products/batch", json={"products": [_item("IDEM-2")]}, headers=key)
    assert_problem(other, 422)


def test_the_batch_has_its_own_rate_limit_in_the_contract(anonymous):
    operation = anonymous.get("/v3/openapi.json").json()["paths"]["/products/batch"]["post"]
    assert operation["x-rate-limit"] == "30/minute"
    assert "/products/batch" not in anonymous.get("/v2/openapi.json").json()["paths"]


def test_a_method_the_batch_does_not_take_is_405_naming_the_batchs_own(client):
    """/products/batch also fits /products/{id}: the Allow header is the batch's, as routing is."""
    response = client.request("OPTIONS", "/v3/products/batch")
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"


# v3's own product field, `weight_grams`: stored, filtered and sorted in v3 alone; v1 and v2
# neither show nor take it, and never reset it.


def test_a_v3_product_has_a_weight_that_v1_and_v2_do_not_show(client):
    product = create_v3_product(client, weight_grams=330)
    assert product["weight_grams"] == 330
    assert client.get(f"/v3/products/{product['id']}").json() == product
    for version in (1, 2):
        shown = client.get(f"/v{version}/products/{product['id']}").json()
        assert "weight_grams" not in shown
        listed = client.get(f"/v{version}/products").json()["data"]
        assert all("weight_grams" not in item for item in listed)
    # Not sent: not known.
    assert create_v3_product(client, sku="CUP-001")["weight_grams"] is None


def test_v3_shows_every_field_a_product_has(client):
    """Every column of a product, money as v3 writes it (`price` for `price_cents` and
    `currency`): a column added without its field in the spec would show nowhere."""
    columns = set(Product._meta.sorted_field_names)
    for name, (minor, currency) in Product.money_fields.items():
        columns = columns - {minor.name, currency.name} | {name}
    assert set(create_v3_product(client)) == columns


@pytest.mark.parametrize("version", [1, 2])
def test_v1_and_v2_refuse_a_weight_as_an_unknown_field(client, version):
    product = create_v3_product(client, weight_grams=330)
    url = f"/v{version}/products/{product['id']}"
    for response in (
        client.patch(url, json={"weight_grams": 1}),
        client.post(f"/v{version}/products", json={"sku": "NEW-1", "name": "N", "weight_grams": 1}),
    ):
        body = assert_problem(response, 400)
        assert "weight_grams" in response.text, body
    assert client.get(f"/v3/products/{product['id']}").json()["weight_grams"] == 330


@pytest.mark.parametrize("version", [1, 2])
def test_a_v1_or_v2_put_or_patch_keeps_the_weight_it_cannot_see(client, version):
    product = create_v3_product(client, weight_grams=330, category="kitchen")
    url = f"/v{version}/products/{product['id']}"
    seen = client.get(url).json()
    replacement = {k: v for k, v in seen.items() if k not in ("id", "created_at", "updated_at")}
    replacement |= {"name": "Big mug", "category": None}
    replaced = client.put(url, json=replacement)
    assert replaced.status_code == 200, replaced.text
    assert client.patch(url, json={"stock": 4}).status_code == 200
    after = client.get(f"/v3/products/{product['id']}").json()
    assert (after["name"], after["category"], after["stock"]) == ("Big mug", None, 4)
    assert after["weight_grams"] == 330
    # v3's own PUT replaces every field it has: a weight left out is no longer known.
    v3 = {k: after[k] for k in ("sku", "name", "price", "stock")}
    assert client.put(f"/v3/products/{product['id']}", json=v3).json()["weight_grams"] is None


def test_an_if_match_is_compared_with_the_tag_its_own_version_gave(client):
    product = create_v3_product(client, weight_grams=330)
    url = f"/products/{product['id']}"
    v1_tag = client.get(f"/v1{url}").headers["etag"]
    v3_tag = client.get(f"/v3{url}").headers["etag"]
    assert v1_tag != v3_tag
    stale = client.patch(f"/v1{url}", json={"stock": 1}, headers={"If-Match": v3_tag})
    assert_problem(stale, 412)
    fresh = client.patch(f"/v1{url}", json={"stock": 1}, headers={"If-Match": v1_tag})
    assert fresh.status_code == 200, fresh.text


def test_v3_filters_and_sorts_by_weight(client):
    weights = {"A-1": 500, "B-1": None, "C-1": 20, "D-1": 330}
    for sku, weight in weights.items():
        create_v3_product(client, sku=sku, weight_grams=weight)

    def skus(**params):
        response = client.get("/v3/products", params=params)
        assert response.status_code == 200, response.text
        return [product["sku"] for product in response.json()["data"]]

    assert skus(sort="weight_grams") == ["C-1", "D-1", "A-1", "B-1"]  # missing last
    assert skus(sort="-weight_grams") == ["B-1", "A-1", "D-1", "C-1"]
    assert skus(**{"weight_grams[gte]": 330}) == ["A-1", "D-1"]
    assert skus(weight_grams="null") == ["B-1"]
    assert skus(sort="weight_grams", per_page=1, fields="sku,weight_grams") == ["C-1"]
    # Not a v1 or v2 filter or sort.
    for version in (1, 2):
        assert_problem(client.get(f"/v{version}/products", params={"weight_grams": 20}), 400)
        assert_problem(client.get(f"/v{version}/products", params={"sort": "weight_grams"}), 400)


def test_a_sort_by_weight_is_read_in_order_from_an_index(client, caplog):
    if not is_postgresql():
        pytest.skip("SQLite's plans are not held here: it is the small, embedded default")
    for weight in (500, 20, 330):
        create_v3_product(client, sku=f"W-{weight}", weight_grams=weight)
    with caplog.at_level(logging.DEBUG, logger="peewee"):
        assert client.get("/v3/products?sort=-weight_grams&per_page=2").status_code == 200
    (sql, params) = next(
        record.msg
        for record in reversed(caplog.records)
        if isinstance(record.msg, tuple) and '"weight_grams" DESC' in record.msg[0]
    )
    with database.connection_context(), database.atomic():
        database.execute_sql("SET LOCAL enable_sort = off")
        database.execute_sql("SET LOCAL enable_seqscan = off")
        plan = "\n".join(row[0] for row in database.execute_sql(f"EXPLAIN {sql}", params))
    assert "product_weight_grams_id" in plan, plan
    assert not re.search(r"(?<!Incremental )Sort  \(", plan), plan


def test_a_batch_writes_weights_and_replaces_them_as_put_does(client):
    known = create_v3_product(client, sku="OLD-1", weight_grams=900)
    batch = [_item("NEW-1", weight_grams=120), _item("OLD-1")]
    data = client.post("/v3/products/batch", json={"products": batch}).json()["data"]
    assert [p["weight_grams"] for p in data] == [120, None]
    assert data[1]["id"] == known["id"]


@pytest.mark.parametrize("version", [1, 2, 3])
def test_each_versions_events_show_the_product_in_its_own_form(client, version):
    product = create_v3_product(client, weight_grams=330)
    client.patch(f"/v1/products/{product['id']}", json={"stock": 2})
    events = client.get(f"/v{version}/events", params={"type": "product.updated"}).json()
    shown = client.get(f"/v{version}/products/{product['id']}").json()
    (updated,) = events["data"]
    assert updated["data"] == shown  # as that version's GET shows it: v1 and v2 without weight
    assert ("weight_grams" in updated["data"]) == (version == 3)
