"""ETags and conditional requests: a strong ETag on every user, product, order and webhook (GET,
PUT, PATCH), a weak one on every list; If-None-Match answers 304; a stale If-Match on PUT, PATCH or
DELETE answers 412 and changes nothing, atomically with the change it guards."""

import datetime
import re
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from support.helpers import (
    assert_problem,
    bearer,
    bearer_for,
    create_product,
    create_user,
    place_order,
)
from support.live import ALL_AT_ONCE, live_server

from shopapi.web.etags import tag_of

STRONG = re.compile(r'^"[A-Za-z0-9_-]+"$')
WEAK = re.compile(r'^W/"[A-Za-z0-9_-]+"$')
RESOURCES = ("products", "users", "orders")


def _new(client, resource: str) -> str:
    """The URL of a new resource of this kind that PUT, PATCH and DELETE all accept."""
    if resource == "products":
        return f"/v1/products/{create_product(client)['id']}"
    if resource == "users":
        return f"/v1/users/{create_user(client)['id']}"
    order = place_order(client, create_user(client), (create_product(client), 1)).json()
    url = f"/v1/orders/{order['id']}"
    # Only a finished order can be deleted; a cancelled one still takes a new note.
    assert client.patch(url, json={"status": "cancelled"}).status_code == 200
    return url


def _replacement(resource: str, url: str) -> dict:
    """A PUT body for the resource at `url` (unique fields made unique by its id)."""
    n = url.rsplit("/", 1)[1]
    return {
        "products": {"sku": f"PUT-{n}", "name": "Replaced", "price_cents": 5},
        "users": {"email": f"replaced{n}@example.com", "name": "Replaced", "password": "12345678"},
        "orders": {"status": "cancelled", "note": "Replaced"},
    }[resource]


PATCHES = {
    "products": {"name": "Patched"},
    "users": {"name": "Patched"},
    "orders": {"note": "Patched"},
}
# What "someone else" changes in between, so that a tag read before is stale.
OTHER_CHANGES = {
    "products": {"stock": 99},
    "users": {"name": "Someone Else"},
    "orders": {"note": "Someone else's note"},
}


def _send(client, method: str, resource: str, url: str, if_match: str | None = None):
    headers = {"If-Match": if_match} if if_match is not None else {}
    if method == "DELETE":
        return client.delete(url, headers=headers)
    body = _replacement(resource, url) if method == "PUT" else PATCHES[resource]
    return client.request(method, url, json=body, headers=headers)


def _stale_tag(client, url: str, resource: str) -> str:
    """A tag read from `url` before someone else changed the resource."""
    stale = client.get(url).headers["etag"]
    assert client.patch(url, json=OTHER_CHANGES[resource]).status_code == 200
    assert client.get(url).headers["etag"] != stale
    return stale


# Reads


@pytest.mark.parametrize("resource", RESOURCES)
def test_get_answers_a_strong_etag_that_changes_when_the_resource_does(client, resource):
    url = _new(client, resource)
    first = client.get(url)
    assert STRONG.match(first.headers["etag"])
    assert client.get(url).headers["etag"] == first.headers["etag"]
    assert client.patch(url, json=OTHER_CHANGES[resource]).status_code == 200
    assert client.get(url).headers["etag"] != first.headers["etag"]


@pytest.mark.parametrize("resource", RESOURCES)
@pytest.mark.parametrize("method", ["PUT", "PATCH"])
def test_a_change_answers_the_etag_that_a_following_get_gives(client, resource, method):
    url = _new(client, resource)
    changed = _send(client, method, resource, url)
    assert changed.status_code == 200, changed.text
    assert STRONG.match(changed.headers["etag"])
    read = client.get(url)
    assert read.json() == changed.json()
    assert read.headers["etag"] == changed.headers["etag"]


@pytest.mark.parametrize("resource", RESOURCES)
def test_the_etag_is_the_hash_of_the_representation_as_received(client, resource):
    # Derived from the body the handler returns, not from columns: the tag of the JSON a client
    # received is the tag it was sent with.
    response = client.get(_new(client, resource))
    assert response.headers["etag"] == tag_of(response.json())


def test_equal_representations_share_a_tag_and_any_difference_changes_it():
    moment = datetime.datetime(2026, 11, 26, 10, 0, 0, 123456, tzinfo=datetime.UTC)
    one = {"id": 1, "items": [{"a": 1, "b": 2}], "at": moment}
    same = {"at": "2026-11-26T10:00:00.123456Z", "items": [{"b": 2, "a": 1}], "id": 1}
    assert tag_of(one) == tag_of(same)
    assert tag_of(one) != tag_of({**one, "id": 2})
    assert tag_of(one) != tag_of({**one, "items": [{"a": 1, "b": 3}]})
    assert tag_of(one) != tag_of({**one, "at": moment + datetime.timedelta(microseconds=1)})
    assert tag_of(one, weak=True) == f"W/{tag_of(one)}"


@pytest.mark.parametrize("resource", RESOURCES)
def test_if_none_match_with_the_current_etag_is_304_with_the_etag_and_no_body(client, resource):
    url = _new(client, resource)
    tag = client.get(url).headers["etag"]
    response = client.get(url, headers={"If-None-Match": tag})
    assert response.status_code == 304
    assert response.headers["etag"] == tag
    assert response.content == b""
    assert "content-type" not in response.headers


@pytest.mark.parametrize("resource", RESOURCES)
def test_a_stale_if_none_match_is_200_with_the_new_representation(client, resource):
    url = _new(client, resource)
    stale = _stale_tag(client, url, resource)
    response = client.get(url, headers={"If-None-Match": stale})
    assert response.status_code == 200
    assert response.headers["etag"] != stale
    assert response.json() == client.get(url).json()


def test_if_none_match_takes_a_star_a_list_and_compares_weakly(client):
    url = f"/v1/products/{create_product(client)['id']}"
    tag = client.get(url).headers["etag"]
    for condition in ("*", f'"other", {tag}', f"W/{tag}", f' , "a,b", W/{tag} ,'):
        response = client.get(url, headers={"If-None-Match": condition})
        assert response.status_code == 304, condition
        assert response.headers["etag"] == tag
    assert client.get(url, headers={"If-None-Match": '"other", W/"x"'}).status_code == 200


@pytest.mark.parametrize("list_path", ["/v1/products", "/v1/users", "/v1/orders", "{orders_of}"])
def test_a_list_answers_a_weak_etag_and_304_until_it_changes(client, list_path):
    user = create_user(client)
    product = create_product(client)
    place_order(client, user, (product, 1))
    url = list_path.format(orders_of=f"/v1/users/{user['id']}/orders")
    first = client.get(url)
    assert WEAK.match(first.headers["etag"])
    # Known before the page is read (docs/web.md), so not its body's hash; the same while
    # nothing changes.
    again = client.get(url)
    assert (again.headers["etag"], again.json()) == (first.headers["etag"], first.json())
    not_modified = client.get(url, headers={"If-None-Match": first.headers["etag"]})
    assert not_modified.status_code == 304
    assert not_modified.headers["etag"] == first.headers["etag"]
    assert not_modified.content == b""
    # Each list changes: one more user, one more order of this user, less of the product's stock.
    create_user(client)
    place_order(client, user, (product, 1))
    changed = client.get(url, headers={"If-None-Match": first.headers["etag"]})
    assert changed.status_code == 200
    assert changed.headers["etag"] != first.headers["etag"]


def test_a_list_page_has_its_own_etag(client):
    for _ in range(3):
        create_product(client)
    whole = client.get("/v1/products").headers["etag"]
    assert client.get("/v1/products?per_page=2").headers["etag"] != whole
    assert client.get("/v1/products?fields=id").headers["etag"] != whole


# Writes


@pytest.mark.parametrize("resource", RESOURCES)
@pytest.mark.parametrize("method", ["PUT", "PATCH"])
def test_a_current_if_match_applies_the_change(client, resource, method):
    url = _new(client, resource)
    tag = client.get(url).headers["etag"]
    response = _send(client, method, resource, url, if_match=tag)
    assert response.status_code == 200, response.text
    expected = _replacement(resource, url) if method == "PUT" else PATCHES[resource]
    shown = {k: v for k, v in expected.items() if k != "password"}
    assert {k: client.get(url).json()[k] for k in shown} == shown


@pytest.mark.parametrize("resource", RESOURCES)
def test_a_current_if_match_deletes(client, resource):
    url = _new(client, resource)
    tag = client.get(url).headers["etag"]
    assert client.delete(url, headers={"If-Match": tag}).status_code == 204
    assert_problem(client.get(url), 404)


@pytest.mark.parametrize("resource", RESOURCES)
@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE"])
def test_a_stale_if_match_is_412_and_changes_nothing(client, resource, method):
    url = _new(client, resource)
    stale = _stale_tag(client, url, resource)
    before = client.get(url)
    body = assert_problem(_send(client, method, resource, url, if_match=stale), 412)
    assert "changed" in body["detail"] and "GET it again" in body["detail"]
    after = client.get(url)
    assert after.status_code == 200
    assert after.json() == before.json()
    assert after.headers["etag"] == before.headers["etag"]


@pytest.mark.parametrize("version", ["v1", "v2", "v3"])
def test_a_webhook_has_a_strong_etag_and_takes_both_conditions(client, version):
    hook = {"url": "https://hooks.example.com/etags", "events": ["order.created"]}
    url = f"/{version}/webhooks/{client.post(f'/{version}/webhooks', json=hook).json()['id']}"
    tag = client.get(url).headers["etag"]
    assert STRONG.match(tag)
    assert client.get(url, headers={"If-None-Match": tag}).status_code == 304
    changed = client.patch(url, json={"description": "Orders"}, headers={"If-Match": tag})
    assert changed.status_code == 200
    assert changed.headers["etag"] == client.get(url).headers["etag"] != tag
    assert_problem(client.patch(url, json={"enabled": False}, headers={"If-Match": tag}), 412)
    assert_problem(client.delete(url, headers={"If-Match": tag}), 412)
    assert client.get(url).json()["enabled"] is True
    assert client.delete(url, headers={"If-Match": changed.headers["etag"]}).status_code == 204


@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE"])
def test_if_match_compares_strongly_and_takes_a_star_and_a_list(client, method):
    url = _new(client, "products")
    tag = client.get(url).headers["etag"]
    assert_problem(_send(client, method, "products", url, if_match=f"W/{tag}"), 412)
    listed = f'"other", {tag}'
    assert _send(client, method, "products", url, if_match=listed).status_code < 300
    url = _new(client, "products")
    assert _send(client, method, "products", url, if_match="*").status_code < 300


@pytest.mark.parametrize("resource", RESOURCES)
@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE"])
def test_if_match_on_a_missing_resource_is_404_not_412(client, resource, method):
    url = f"/v1/{resource}/424242"
    for condition in ("*", '"stale"'):
        assert_problem(_send(client, method, resource, url, if_match=condition), 404)


@pytest.mark.parametrize(
    ("header", "value"),
    [("If-Match", "no-quotes"), ("If-Match", '"a" "b"'), ("If-None-Match", f'"{"x" * 1100}"')],
)
def test_a_malformed_condition_is_400_naming_the_header(client, header, value):
    url = _new(client, "products")
    send = client.get if header == "If-None-Match" else client.patch
    kwargs = {} if header == "If-None-Match" else {"json": {"stock": 1}}
    body = assert_problem(send(url, headers={header: value}, **kwargs), 400)
    assert [error["parameter"] for error in body["errors"]] == [header]


def test_without_if_match_a_change_applies_whatever_happened_since(client):
    url = _new(client, "products")
    _stale_tag(client, url, "products")
    response = client.patch(url, json={"name": "Last writer"})
    assert response.status_code == 200
    assert client.get(url).json()["name"] == "Last writer"


def test_of_two_clients_changing_what_they_read_the_second_gets_412_not_a_lost_update(app):
    alice, bob = app.test_client(), app.test_client()
    alice.headers.update(bearer("client:alice"))
    bob.headers.update(bearer("client:bob"))
    product = create_product(alice, stock=10, price_cents=1000)
    url = f"/v1/products/{product['id']}"
    read_by_alice, read_by_bob = alice.get(url), bob.get(url)
    assert read_by_alice.headers["etag"] == read_by_bob.headers["etag"]

    won = alice.patch(url, json={"stock": 5}, headers={"If-Match": read_by_alice.headers["etag"]})
    assert won.status_code == 200
    lost = bob.patch(
        url, json={"price_cents": 900}, headers={"If-Match": read_by_bob.headers["etag"]}
    )
    assert_problem(lost, 412)
    current = bob.get(url)
    assert (current.json()["stock"], current.json()["price_cents"]) == (5, 1000)

    # Bob reads again, sees Alice's change, and makes his on top of it.
    assert current.headers["etag"] == won.headers["etag"]
    retry = bob.patch(url, json={"price_cents": 900}, headers={"If-Match": current.headers["etag"]})
    assert retry.status_code == 200
    assert (retry.json()["stock"], retry.json()["price_cents"]) == (5, 900)


@pytest.mark.slow
def test_concurrent_changes_based_on_one_etag_apply_exactly_once(app, database_url):
    """The check and the change are one transaction with the row locked: of requests racing
    with the same If-Match against a real server with its real thread pool, one wins. A new
    password makes each change slow (the hash takes ~50 ms between the check and the write), so
    a check that did not hold until the write would let several through."""
    with (
        live_server(database_url, **ALL_AT_ONCE) as base,
        httpx.Client(base_url=base, timeout=30, headers=bearer()) as http,
    ):
        user = http.post(
            "/v1/users", json={"email": "race@example.com", "name": "R", "password": "12345678"}
        ).json()
        url = f"/v1/users/{user['id']}"
        tag = http.get(url).headers["etag"]

        def change(n: int) -> int:
            body = {"name": f"Racer {n}", "password": f"password-{n}"}
            with httpx.Client(base_url=base, timeout=30, headers=bearer()) as own:
                return own.patch(url, json=body, headers={"If-Match": tag}).status_code

        # As many as the server's threads (a2wsgi's pool of 10), so that all run at once.
        with ThreadPoolExecutor(max_workers=10) as pool:
            statuses = list(pool.map(change, range(10)))

        assert statuses.count(200) == 1, statuses
        assert statuses.count(412) == 9, statuses
        assert http.get(url).json()["name"] == f"Racer {statuses.index(200)}"


# Who may see and change what is unchanged


def test_a_customer_uses_etags_on_their_own_order_and_another_is_404_whatever_the_condition(
    client,
):
    carol, dave = create_user(client), create_user(client)
    product = create_product(client)
    own = f"/v1/orders/{place_order(client, carol, (product, 1)).json()['id']}"
    others = f"/v1/orders/{place_order(client, dave, (product, 1)).json()['id']}"
    as_carol = bearer_for(carol)

    tag = client.get(own, headers=as_carol).headers["etag"]
    assert client.get(own, headers={**as_carol, "If-None-Match": tag}).status_code == 304
    assert_problem(client.get(others, headers={**as_carol, "If-None-Match": "*"}), 404)
    for condition in ("*", tag):
        for send in (client.patch, client.put):
            response = send(
                others, json={"status": "cancelled"}, headers={**as_carol, "If-Match": condition}
            )
            assert_problem(response, 404)
        assert_problem(client.delete(others, headers={**as_carol, "If-Match": condition}), 404)

    # A current tag does not make a customer an admin: paying stays 403, cancelling is allowed.
    paying = client.patch(own, json={"status": "paid"}, headers={**as_carol, "If-Match": tag})
    assert_problem(paying, 403)
    cancelling = {**as_carol, "If-Match": tag}
    response = client.patch(own, json={"status": "cancelled"}, headers=cancelling)
    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    assert client.get(others).json()["status"] == "pending"


def test_a_customer_uses_etags_on_their_own_record_and_another_is_404(client):
    carol, dave = create_user(client), create_user(client)
    as_carol = bearer_for(carol)
    own, others = f"/v1/users/{carol['id']}", f"/v1/users/{dave['id']}"

    tag = client.get(own, headers=as_carol).headers["etag"]
    promoting = client.patch(own, json={"role": "admin"}, headers={**as_carol, "If-Match": tag})
    assert_problem(promoting, 403)
    renamed = client.patch(own, json={"name": "Carol"}, headers={**as_carol, "If-Match": tag})
    assert renamed.status_code == 200
    assert client.get(own, headers={**as_carol, "If-None-Match": tag}).status_code == 200
    for condition in ("*", tag):
        headers = {**as_carol, "If-Match": condition}
        assert_problem(client.patch(others, json={"name": "X"}, headers=headers), 404)
        assert_problem(client.delete(others, headers=headers), 404)
    assert client.get(others).json()["name"] == dave["name"]


def test_a_browser_may_send_the_conditions_and_read_the_etag(app_with):
    origin = "https://app.example.com"
    cors = app_with(cors_origins=(origin,)).test_client()
    preflight = cors.options(
        "/v1/products/1",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "PATCH",
            "Access-Control-Request-Headers": "If-Match, If-None-Match",
        },
    )
    assert preflight.status_code == 200
    allowed = preflight.headers["access-control-allow-headers"].lower().replace(" ", "")
    assert {"if-match", "if-none-match"} <= set(allowed.split(","))
    response = cors.get("/v1/products", headers={**bearer(), "Origin": origin})
    assert "etag" in response.headers
    assert "etag" in response.headers["access-control-expose-headers"].lower()
