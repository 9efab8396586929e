"""The list language against a plain Python reference: whatever rows exist and whatever
filters, sort and page size a client picks, the API returns exactly the reference's rows in the
reference's order — walking offset pages, and walking cursor pages."""

import datetime
import functools
from urllib.parse import urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models import Product

UTC = datetime.UTC
MOMENTS = [datetime.datetime(2026, 1, 1, 12, 0, s, tzinfo=UTC) for s in (0, 0, 30)]
# Few distinct values, so ties, NULLs and matches are common; %, _ and accents test escaping
# and ASCII-only case folding.
TEXT = st.text(alphabet="aAbB%_éÉ ", max_size=4)

FIELDS = {
    "name": st.text(alphabet="aAbB%_éÉ ", min_size=1, max_size=4),
    "description": st.none() | TEXT,
    "category": st.sampled_from([None, "books", "Books", "kitchen"]),
    "price_cents": st.integers(0, 4),
    "currency": st.sampled_from(["EUR", "USD"]),
    "stock": st.integers(0, 3),
    "active": st.booleans(),
    "created_at": st.sampled_from(MOMENTS),
}
ORDERED = {"name", "description", "category", "price_cents", "stock", "created_at", "currency"}
TEXTUAL = {"name", "description", "category"}
NULLABLE = {"description", "category"}

rows_strategy = st.lists(st.fixed_dictionaries(FIELDS), max_size=14)


@st.composite
def filters(draw):
    chosen = []
    for _ in range(draw(st.integers(0, 2))):
        field = draw(st.sampled_from(sorted(FIELDS)))
        ops = ["eq", "ne"]
        if field in ORDERED:
            ops += ["lt", "lte", "gt", "gte"]
        if field != "active":
            ops.append("in")
        if field in TEXTUAL:
            ops.append("contains")
        op = draw(st.sampled_from(ops))
        value_strategy = FIELDS[field].filter(lambda v: v is not None)
        if op == "in":
            value = draw(st.lists(value_strategy, min_size=1, max_size=3))
            if field in TEXTUAL:
                value = [v for v in value if v]  # an empty item is no value in a comma list
                if not value:
                    continue
        elif op in ("eq", "ne") and field in NULLABLE and draw(st.booleans()):
            value = None
        else:
            value = draw(value_strategy)
        chosen.append((field, op, value))
    return chosen


sorts = st.lists(
    st.tuples(st.sampled_from(sorted(FIELDS)), st.booleans()), max_size=3, unique_by=lambda k: k[0]
)


def as_query_value(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime.datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, list):
        return ",".join(as_query_value(v) for v in value)
    return str(value)


def fold(text: str) -> str:
    return "".join(c.lower() if "A" <= c <= "Z" else c for c in text)


def matches(row, field, op, value):
    actual = row[field]
    if op == "eq":
        return actual is None if value is None else actual == value
    if op == "ne":
        return actual is not None if value is None else actual != value
    if actual is None:
        return False
    if op == "in":
        return actual in value
    if op == "contains":
        return fold(value) in fold(actual)
    return {
        "lt": actual < value,
        "lte": actual <= value,
        "gt": actual > value,
        "gte": actual >= value,
    }[op]


def reference(rows, chosen, sort_keys):
    kept = [r for r in rows if all(matches(r, f, o, v) for f, o, v in chosen)]

    def compare(a, b):
        for field, descending in [*sort_keys, ("id", False)]:
            x, y = a[field], b[field]
            if x == y:
                continue
            # A missing value is the greatest: last ascending, first descending.
            before = (y is None) if (x is None or y is None) else x < y
            return (1 if before else -1) if descending else (-1 if before else 1)
        return 0

    return [r["id"] for r in sorted(kept, key=functools.cmp_to_key(compare))]


def walk_offset(client, query, per_page):
    ids, page = [], 1
    while True:
        body = client.get(
            f"/v1/products?{urlencode({**query, 'per_page': per_page, 'page': page})}"
        )
        assert body.status_code == 200, body.text
        body = body.json()
        ids += [item["id"] for item in body["data"]]
        if page >= body["meta"]["total_pages"]:
            return ids, body["meta"]["total"]
        page += 1


def walk_cursor(client, query, per_page):
    ids, cursor = [], None
    for _ in range(100):
        params = {**query, "per_page": per_page, **({"cursor": cursor} if cursor else {})}
        response = client.get(f"/v1/products?{urlencode(params)}")
        assert response.status_code == 200, response.text
        body = response.json()
        ids += [item["id"] for item in body["data"]]
        cursor = body["meta"]["next_cursor"]
        if cursor is None:
            return ids
    raise AssertionError("the cursor walk did not end")


@pytest.mark.slow
@pytest.mark.search  # as many examples as the Hypothesis profile gives (tests/conftest.py)
@settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(rows=rows_strategy, chosen=filters(), sort_keys=sorts, per_page=st.integers(1, 5))
def test_lists_match_the_reference(client, rows, chosen, sort_keys, per_page):
    Product.delete().execute()
    stored = []
    for index, fields in enumerate(rows):
        product = Product.create(sku=f"P-{index:03d}", **fields)
        stored.append({**fields, "id": product.id})

    query = {}
    for field, op, value in chosen:
        query[field if op == "eq" else f"{field}[{op}]"] = as_query_value(value)
    # A repeated filter parameter keeps its last value, as in the query string.
    chosen = list({(f if o == "eq" else f"{f}[{o}]"): (f, o, v) for f, o, v in chosen}.values())
    if sort_keys:
        query["sort"] = ",".join(("-" if desc else "") + field for field, desc in sort_keys)

    expected = reference(stored, chosen, sort_keys)
    by_offset, total = walk_offset(client, query, per_page)
    assert total == len(expected)
    assert by_offset == expected
    assert walk_cursor(client, query, per_page) == expected
