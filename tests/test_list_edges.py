"""The list language's rules, one example each, and its refusals."""

import logging
import re
from urllib.parse import quote

import pytest
from support.contract_walk import operations
from support.helpers import assert_problem, create_product, create_user, place_order

from models.db import database, is_postgresql
from shopapi.contract.list_language import TEXT_FILTER_MAX_LENGTH, filterable, listed_properties


def ids(response):
    assert response.status_code == 200, response.text
    return [item["id"] for item in response.json()["data"]]


def test_ne_includes_missing_values_and_comparisons_never_match_them(client):
    books = create_product(client, category="books")
    none = create_product(client, category=None)
    toys = create_product(client, category="toys")
    assert ids(client.get("/v1/products?category[ne]=books")) == [none["id"], toys["id"]]
    assert ids(client.get("/v1/products?category=null")) == [none["id"]]
    assert ids(client.get("/v1/products?category[ne]=null")) == [books["id"], toys["id"]]
    assert ids(client.get("/v1/products?category[lt]=zzz")) == [books["id"], toys["id"]]


def test_contains_takes_percent_and_underscore_literally_and_folds_ascii_only(client):
    percent = create_product(client, name="50% off")
    plain = create_product(client, name="500 off")
    accented = create_product(client, name="CAFÉ")
    assert ids(client.get("/v1/products?name[contains]=0%25")) == [percent["id"]]
    assert ids(client.get("/v1/products?name[contains]=0_")) == []
    assert ids(client.get("/v1/products?name[contains]=OFF")) == [percent["id"], plain["id"]]
    assert ids(client.get("/v1/products?name[contains]=caf")) == [accented["id"]]
    assert ids(client.get("/v1/products?name[contains]=café")) == []


def test_text_sorts_by_code_point(client):
    names = ["b", "B", "a", "é", "Z"]
    made = {create_product(client, name=n)["name"]: None for n in names}
    response = client.get("/v1/products?sort=name&fields=name")
    assert [p["name"] for p in response.json()["data"]] == sorted(made)  # "B" "Z" "a" "b" "é"


def test_missing_values_sort_last_ascending_and_first_descending(client):
    late = create_product(client, category="z")
    missing = create_product(client, category=None)
    early = create_product(client, category="a")
    assert ids(client.get("/v1/products?sort=category")) == [early["id"], late["id"], missing["id"]]
    assert ids(client.get("/v1/products?sort=-category")) == [
        missing["id"],
        late["id"],
        early["id"],
    ]


def test_filters_combine_and_in_takes_a_typed_list(client):
    user = create_user(client)
    product = create_product(client, stock=100)
    placed = [place_order(client, user, (product, 1)).json() for _ in range(4)]
    client.patch(f"/v1/orders/{placed[1]['id']}", json={"status": "paid"})
    client.patch(f"/v1/orders/{placed[2]['id']}", json={"status": "cancelled"})
    assert ids(client.get("/v1/orders?status[in]=paid,cancelled")) == [
        placed[1]["id"],
        placed[2]["id"],
    ]
    query = f"/v1/orders?status=pending&id[gt]={placed[0]['id']}&user_id={user['id']}"
    assert ids(client.get(query)) == [placed[3]["id"]]
    assert_problem(client.get("/v1/orders?status[in]=paid,lost"), 400)


def test_a_cursor_walk_neither_repeats_nor_skips_while_rows_are_added(client):
    made = [create_product(client, price_cents=p) for p in (5, 1, 3, 1, 4)]
    first = client.get("/v1/products?sort=price_cents&per_page=2").json()
    seen = [p["id"] for p in first["data"]]
    create_product(client, price_cents=0)  # sorts before where the walk is: not seen
    late = create_product(client, price_cents=9)  # sorts after: seen at the end
    cursor = first["meta"]["next_cursor"]
    while cursor:
        page = client.get(f"/v1/products?sort=price_cents&per_page=2&cursor={cursor}").json()
        assert "page" not in page["meta"]
        seen += [p["id"] for p in page["data"]]
        cursor = page["meta"]["next_cursor"]
    by_price = sorted(made, key=lambda p: (p["price_cents"], p["id"]))
    assert seen == [p["id"] for p in by_price] + [late["id"]]


def test_cursor_links_lead_on(client):
    for _ in range(3):
        create_product(client)
    first = client.get("/v1/products?per_page=2&sort=-id")
    cursor = first.json()["meta"]["next_cursor"]
    second = client.get(f"/v1/products?per_page=2&sort=-id&cursor={cursor}")
    links = second.json()["links"]
    assert "next" not in links and second.json()["meta"]["next_cursor"] is None
    assert links["first"] == "/v1/products?per_page=2&sort=-id"


def test_a_tampered_or_foreign_cursor_is_400(client):
    for _ in range(3):
        create_product(client, category="x")
    cursor = client.get("/v1/products?category=x&per_page=1").json()["meta"]["next_cursor"]
    payload, mac = cursor.split(".")
    tampered = payload[:-2] + ("A" if payload[-2] != "A" else "B") + payload[-1] + "." + mac
    for query, why in [
        (f"category=x&cursor={tampered}", "issued"),
        ("category=x&cursor=garbage", "issued"),
        (f"category=y&cursor={cursor}", "other filters"),
        (f"category=x&sort=name&cursor={cursor}", "other filters"),
    ]:
        body = assert_problem(client.get(f"/v1/products?{query}"), 400)
        assert body["errors"][0]["parameter"] == "cursor"
        assert why in body["errors"][0]["detail"]
    assert_problem(client.get(f"/v1/orders?cursor={cursor}"), 400)
    body = assert_problem(client.get(f"/v1/products?category=x&page=1&cursor={cursor}"), 400)
    assert body["errors"][0]["parameter"] == "cursor"


def test_fields_selects_top_level_fields(client):
    product = create_product(client)
    body = client.get("/v1/products?fields=sku,id").json()
    assert body["data"] == [{"id": product["id"], "sku": product["sku"]}]
    assert_problem(client.get("/v1/products?fields=id,password"), 400)
    assert_problem(client.get("/v1/users?fields=password"), 400)


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("colour=red", "colour"),
        ("price_cents[like]=1", "price_cents[like]"),
        ("price_cents[gte]=cheap", "price_cents[gte]"),
        ("active=maybe", "active"),
        ("created_at[gt]=yesterday", "created_at[gt]"),
        ("created_at[gt]=2026-01-01T10:00:00", "created_at[gt]"),
        ("created_at[gt]=2026-02-30T10:00:00Z", "created_at[gt]"),
        ("active[gt]=true", "active[gt]"),
        ("sort=colour", "sort"),
        ("sort=name,", "sort"),
        ("sort=name%0A", "sort"),  # the contract's `$` is the very end (ECMA-262), not before "\n"
        ("fields=name%0A", "fields"),
        ("per_page=500", "per_page"),
        ("cursor=%00", "cursor"),
        ("name=a%00b", "name"),
    ],
)
def test_bad_list_parameters_are_400_naming_them(client, query, parameter):
    body = assert_problem(client.get(f"/v1/products?{query}"), 400)
    assert parameter in [error["parameter"] for error in body["errors"]]


def test_sql_looking_values_are_only_values(client):
    product = create_product(client, name="x' OR '1'='1")
    create_product(client, name="other")
    assert ids(client.get("/v1/products?name=x' OR '1'='1")) == [product["id"]]
    assert ids(client.get("/v1/products?name[contains]=' OR 1=1 --")) == []
    assert ids(client.get("/v1/products?sku[in]=a');DROP TABLE product;--")) == []
    assert client.get("/v1/products").json()["meta"]["total"] == 2


def test_a_single_valued_parameter_given_twice_is_refused(client):
    response = client.get("/v1/products?description=a&description=b")
    body = assert_problem(response, 400)
    assert body["errors"] == [{"parameter": "description", "detail": "is given more than once"}]
    assert_problem(client.get("/v1/products?page=1&page=2"), 400)
    assert client.get("/v1/products?sku[in]=A,B").status_code == 200


@pytest.mark.parametrize("version", [1, 2, 3])
def test_an_in_filter_takes_a_comma_list_or_repeated_keys_alike(client, version):
    """Generated clients send an array parameter as repeated keys (`sku[in]=A&sku[in]=B`);
    every value counts, as in the comma list the contract describes."""
    a, b, c = (create_product(client, sku=f"IN-{n}") for n in "ABC")
    base = f"/v{version}/products"
    both = [a["id"], b["id"]]
    assert ids(client.get(f"{base}?sku[in]=IN-A,IN-B")) == both
    assert ids(client.get(f"{base}?sku[in]=IN-A&sku[in]=IN-B")) == both
    assert ids(client.get(f"{base}?sku[in]=IN-A,IN-B&sku[in]=IN-C")) == [*both, c["id"]]
    assert ids(client.get(f"{base}?id[in]={a['id']}&id[in]={c['id']}")) == [a["id"], c["id"]]
    user = create_user(client)
    paid, pending = (place_order(client, user, (a, 1)).json() for _ in range(2))
    client.patch(f"/v{version}/orders/{paid['id']}", json={"status": "paid"})
    statuses = "status[in]=paid&status[in]=cancelled"
    assert ids(client.get(f"/v{version}/orders?{statuses}")) == [paid["id"]]
    assert pending["id"] not in ids(client.get(f"/v{version}/orders?{statuses}"))


def _is_text(field: dict) -> bool:
    """Text: a string that is no enum, time or decimal amount, whatever else its format."""
    return (
        field["type"] == "string"
        and "enum" not in field
        and field.get("format") not in ("date-time", "decimal")
    )


def _listed_fields(client):
    """(list operation, {field name: its schema, every filter parameter of it}) of each list of
    the served contracts."""
    for op in operations(client):
        resource = op.resolve.document["paths"][op.template.removeprefix(f"/v{op.version}")]
        resource = resource["get"].get("x-list-of") if op.method == "GET" else None
        if resource is None:
            continue
        document = op.resolve.document
        schema = document["components"]["schemas"][resource]
        fields = filterable(listed_properties(schema, document), document)
        parameters = {p["name"]: p for p in op.query_parameters()}
        yield (
            op,
            {
                name: (field, {k: v for k, v in parameters.items() if k.partition("[")[0] == name})
                for name, field in fields.items()
            },
        )


def test_every_text_field_takes_contains_of_any_text_and_no_other_field_does(client):
    """`[contains]` is on every text field, whatever its format (email, URI), its value any text
    (a part of an email address is no email address); not on enums, times, amounts, numbers."""
    texts = set()
    for op, fields in _listed_fields(client):
        for name, (field, parameters) in fields.items():
            contains = parameters.get(f"{name}[contains]")
            if not _is_text(field):
                assert contains is None, (op, name)
                continue
            texts.add(name)
            assert contains is not None, (op, name)
            assert "format" not in contains["schema"], (op, name)
            # Any text: in no field's format, a part of an email address or URL.
            url = f"{op.url()}?{quote(name)}[contains]={quote('é@ a://')}"
            assert client.get(url).status_code in (200, 404), (op, name)
    assert {"email", "url", "name", "sku", "note"} <= texts


def test_contains_finds_the_users_of_a_domain_and_the_webhooks_of_a_host(client):
    ada = create_user(client, email="ada@example.com")
    create_user(client, email="bob@elsewhere.org")
    cy = create_user(client, email="cy@sub.EXAMPLE.com")
    assert ids(client.get("/v1/users?email[contains]=example.com")) == [ada["id"], cy["id"]]
    assert ids(client.get("/v2/users?email[contains]=@EXAMPLE.")) == [ada["id"]]
    hooks = [
        client.post("/v1/webhooks", json={"url": url, "events": ["order.created"]}).json()
        for url in ("https://partner.example.com/hooks", "https://other.example.net/hooks")
    ]
    assert ids(client.get("/v1/webhooks?url[contains]=partner.example")) == [hooks[0]["id"]]


def _text_of(field: dict, length: int) -> str:
    """A value of `length` characters in the field's format."""
    if field.get("format") == "email":
        # Labels of at most 63 characters, the rest in the local part.
        domain = ("a" * 63 + ".") * ((length - 70) // 64) + "b"
        return "a" * (length - len(domain) - 1) + "@" + domain
    if field.get("format") == "uri":
        return "https://" + "a" * (length - 8)
    return "a" * length


def test_a_text_filter_value_is_at_most_as_long_as_the_field(client):
    """A text value longer than the field's maxLength (else TEXT_FILTER_MAX_LENGTH) is a 400
    naming it; at the limit it is a query like any other. SQLite used to answer a 64,000-character
    `[contains]` with a 503, "database unavailable": its LIKE takes at most 50,000 bytes."""
    user = create_user(client)
    product = create_product(client, description="d", category="c")
    assert place_order(client, user, (product, 1)).status_code == 201  # rows for LIKE to read
    body = assert_problem(client.get("/v1/products?name[contains]=" + "a" * 64_000), 400)
    assert body["errors"] == [
        {"parameter": "name[contains]", "detail": "is longer than 200 characters"}
    ]
    checked = 0
    for op, fields in _listed_fields(client):
        for name, (field, parameters) in fields.items():
            if not _is_text(field):
                continue
            limit = field.get("maxLength", TEXT_FILTER_MAX_LENGTH)
            for parameter in parameters.values():
                schema = parameter["schema"]
                assert schema.get("items", schema)["maxLength"] == limit, (op, parameter)
            names = [quote(parameter, safe="[]") for parameter in parameters]
            too_long = "&".join(f"{n}={_text_of(field, limit + 1)}" for n in names)
            body = assert_problem(client.get(f"{op.url(id=user['id'])}?{too_long}"), 400)
            assert sorted(e["parameter"] for e in body["errors"]) == sorted(parameters), op
            at_limit = "&".join(f"{n}={_text_of(field, limit)}" for n in names)
            response = client.get(f"{op.url(id=user['id'])}?{at_limit}")
            assert response.status_code == 200, (op, name, response.text)
            checked += 1
    assert checked > 30  # the text fields of every list


@pytest.mark.parametrize("version", ["v2", "v3"])
def test_a_sort_by_price_amount_is_read_in_order_from_an_index(client, caplog, version):
    """v2's and v3's sort by `price.amount` (an amount computed in SQL, comparable across
    currencies) is served by an index on PostgreSQL, as v1's by `price_cents` is: with sorting
    forbidden to the planner, the page's query still reads the amount's order from the index
    (at most the ties are put in `id` order: an incremental sort). Without the index, every
    matching product's amount was computed and sorted for each page."""
    if not is_postgresql():
        pytest.skip("SQLite matches an index's expression only against the same literal text")
    for cents, currency in [(1000, "EUR"), (500, "JPY"), (2500, "BHD")]:
        create_product(client, price_cents=cents, currency=currency, category="books")
    with caplog.at_level(logging.DEBUG, logger="peewee"):
        path = f"/{version}/products?category=books&sort=-price.amount&per_page=2"
        assert client.get(path).status_code == 200
    sorted_by_amount = [
        record.msg
        for record in caplog.records
        if record.name == "peewee"
        and isinstance(record.msg, tuple)
        and record.msg[0].startswith("SELECT")
        and "ORDER BY (" in record.msg[0]
    ]
    assert sorted_by_amount, "the list's query was not seen"
    sql, params = sorted_by_amount[-1]
    with database.connection_context(), database.atomic():
        database.execute_sql("SET LOCAL enable_sort = off")
        plan = "\n".join(row[0] for row in database.execute_sql(f"EXPLAIN {sql}", params))
    assert "product_price_amount_id" in plan, plan
    assert not re.search(r"(?<!Incremental )Sort  \(", plan), plan
