"""A list revalidated as before is answered 304 before Flask (shopapi/pipeline/revalidation.py):
once its handler has found the list's tag for a request, the same request by the same caller is
answered from the versions of the tables that tag was made from, with what the handler would
have answered. Anything else goes on to the handler."""

import logging

import pytest
from support.contract_walk import operations
from support.helpers import bearer, bearer_for, create_product, create_user, place_order

from models import table_versions
from shopapi.contract.validation import ParameterValidator
from shopapi.events.worker import fan_out
from shopapi.web import remembered_lists

_VOLATILE = {"x-request-id", "date", "server"}


@pytest.fixture
def handled(app):
    """How many requests reached Flask."""
    counted = []

    def count() -> None:
        counted.append(1)

    hooks = app.app.before_request_funcs.setdefault(None, [])
    hooks.append(count)
    yield counted
    hooks.remove(count)


@pytest.fixture
def validated(monkeypatch):
    """How many requests had their parameters validated."""
    counted = []
    validate = ParameterValidator.validate_request

    def counting(self, request):
        counted.append(1)
        return validate(self, request)

    monkeypatch.setattr(ParameterValidator, "validate_request", counting)
    return counted


def _headers(response) -> dict:
    return {k: v for k, v in response.headers.items() if k.lower() not in _VOLATILE}


def test_a_list_revalidated_again_is_answered_as_its_handler_did_without_it(client, handled):
    create_product(client)
    listed = client.get("/v1/products?sort=-price_cents")
    current = {"If-None-Match": listed.headers["etag"]}
    by_the_handler = client.get("/v1/products?sort=-price_cents", headers=current)
    reached = len(handled)
    again = client.get("/v1/products?sort=-price_cents", headers=current)
    assert len(handled) == reached  # answered before Flask
    assert (by_the_handler.status_code, again.status_code) == (304, 304)
    assert _headers(again) == _headers(by_the_handler)
    assert again.content == by_the_handler.content == b""


def test_a_list_revalidated_again_is_answered_before_its_validation(client, validated):
    create_product(client)
    current = {"If-None-Match": client.get("/v1/products").headers["etag"]}
    assert client.get("/v1/products", headers=current).status_code == 304
    reached = len(validated)
    assert client.get("/v1/products", headers=current).status_code == 304
    assert len(validated) == reached


def test_a_condition_naming_the_tag_among_others_is_left_to_validation_and_the_handler(
    client, handled
):
    create_product(client)
    tag = client.get("/v1/products").headers["etag"]
    assert client.get("/v1/products", headers={"If-None-Match": tag}).status_code == 304
    reached = len(handled)
    among_others = client.get("/v1/products", headers={"If-None-Match": f'W/"other", {tag}'})
    assert among_others.status_code == 304  # the handler's weak comparison
    assert among_others.headers["etag"] == tag
    # The tag, then what the contract's If-None-Match is not: refused, as it was the first time.
    refused = client.get("/v1/products", headers={"If-None-Match": f"{tag}, not-a-tag"})
    assert refused.status_code == 400
    assert refused.headers["content-type"] == "application/problem+json"
    assert len(handled) == reached + 1


def test_a_write_to_a_table_the_list_reads_ends_it(client, handled):
    create_product(client)
    listed = client.get("/v1/products")
    current = {"If-None-Match": listed.headers["etag"]}
    for _ in range(2):
        assert client.get("/v1/products", headers=current).status_code == 304
    create_product(client, sku="ANOTHER-1")
    changed = client.get("/v1/products", headers=current)
    assert changed.status_code == 200
    assert changed.headers["etag"] != listed.headers["etag"]
    assert len(changed.json()["data"]) == 2


def test_another_caller_another_query_or_version_is_not_answered_from_it(client, app, handled):
    create_product(client)
    listed = client.get("/v1/products")
    current = {"If-None-Match": listed.headers["etag"]}
    for _ in range(2):
        assert client.get("/v1/products", headers=current).status_code == 304
    customer = app.test_client()
    customer.headers.update(bearer_for(create_user(client)))
    reached = len(handled)
    # Each its own request: the handler answers it, with a tag of its own.
    assert customer.get("/v1/products", headers=current).status_code == 200
    assert client.get("/v1/products?per_page=5", headers=current).status_code == 200
    assert client.get("/v2/products", headers=current).status_code == 200
    partner = {**bearer(subject="client:partner", scopes=["products:read"]), **current}
    assert client.get("/v1/products", headers=partner).status_code == 200
    assert len(handled) == reached + 4


def test_a_list_whose_owner_is_gone_is_404_however_it_was_revalidated(client):
    user = create_user(client)
    url = f"/v1/users/{user['id']}/orders"
    listed = client.get(url)
    assert listed.status_code == 200 and listed.json()["data"] == []
    current = {"If-None-Match": listed.headers["etag"]}
    for _ in range(2):
        assert client.get(url, headers=current).status_code == 304
    assert client.delete(f"/v1/users/{user['id']}").status_code == 204
    assert client.get(url, headers=current).status_code == 404


# Tables that say when the others changed: every tagged list reads them, and shows nothing of them.
_BOOKKEEPING = {"table_version", "owner_version"}


def test_every_lists_tag_follows_every_table_its_request_reads(client, caplog, monkeypatch):
    """Every list operation of every version (every expansion too): the tables its tag is made
    from, which a revalidation is later answered from, include every listed table its request
    read. A handler whose `load` or `fetch` reads a table it leaves out of `reads` fails here,
    before a client is answered 304 for a list that changed."""
    user = create_user(client)
    product = create_product(client)
    assert place_order(client, user, (product, 1)).status_code == 201
    hook = {"url": "https://hooks.example.com/shopapi", "events": ["order.created"]}
    webhook = client.post("/v1/webhooks", json=hook).json()
    device = {"platform": "fcm", "token": "fGx1-example:APA91bH" + "x" * 140}
    device = client.post(f"/v1/users/{user['id']}/devices", json=device).json()
    fan_out()
    ids = {"id": user["id"], "user_id": user["id"], "webhook_id": webhook["id"]}
    ids["device_id"] = device["id"]
    noted = []
    monkeypatch.setattr(remembered_lists, "note", lambda tables, *_: noted.append(tables))

    checked = []
    for op in operations(client, versions=(1, 2, 3)):
        if op.method != "GET" or not any(p["name"] == "sort" for p in op.query_parameters()):
            continue
        queries = [{}]
        for parameter in op.query_parameters():
            if parameter["name"] == "expand":
                expansions = op.resolve(parameter["schema"]["items"])["enum"]
                queries.append({"expand": ",".join(expansions)})
        for query in queries:
            noted.clear()
            caplog.clear()
            with caplog.at_level(logging.DEBUG, logger="peewee"):
                response = client.get(op.url(**ids), params=query)
            assert response.status_code == 200, (op, query, response.text)
            if not noted:
                continue  # no tag made before the page: its body is hashed
            read = set()
            for record in caplog.records:
                if record.name == "peewee" and isinstance(record.msg, tuple):
                    read |= table_versions.tables_read_by(record.msg[0])
            read = (read & table_versions.VERSIONED) - _BOOKKEEPING
            tagged = {table.partition("@")[0] for table in noted[-1]}
            assert read <= tagged, (str(op), query, sorted(read - tagged))
            checked.append(f"{op} {query}")
    assert len(checked) >= 20, checked
