"""Who may call what: every operation needs credentials (401), its declared scopes (403), and
reaches only what its caller owns (404); with the right credentials, every operation works.

The operations and their scopes are read from the spec, so an operation added without a
security declaration, or without a case here, fails these tests.
"""

import datetime
import time

import pytest
from jose import jwt
from support.helpers import (
    JWT_SECRET,
    assert_problem,
    bearer,
    bearer_for,
    claims,
    create_product,
    create_user,
    place_order,
    segment,
)
from support.live import ROOT

from models import ApiKey
from models.user import SCOPES
from shopapi.contract import spec_files

SPEC = spec_files.load(ROOT / "spec" / "openapi.yaml")


def _secured_operations() -> dict[str, tuple[str, str, list[str]]]:
    operations = {}
    for path, item in SPEC["paths"].items():
        for method, operation in item.items():
            if not isinstance(operation, dict) or "operationId" not in operation:
                continue
            requirement = operation.get("security", SPEC["security"])
            if requirement == []:
                continue
            # OpenAPI 3.0 gives scopes to OAuth schemes only: an API key needs the oauth2
            # requirement's scopes (test_a_missing_scope_is_403 checks both schemes).
            assert requirement[1] == {"apiKey": []}, operation["operationId"]
            operations[operation["operationId"]] = (
                method.upper(),
                "/v1" + path,
                requirement[0]["oauth2"],
            )
    return operations


OPERATIONS = _secured_operations()


def _success_status(operation_id: str) -> int:
    method, path, _ = OPERATIONS[operation_id]
    responses = SPEC["paths"][path.removeprefix("/v1")][method.lower()]["responses"]
    return min(int(code) for code in responses if code.startswith("2"))


def test_only_the_token_endpoint_is_public():
    public = {
        operation["operationId"]
        for item in SPEC["paths"].values()
        for operation in item.values()
        if isinstance(operation, dict) and operation.get("security") == []
    }
    assert public == {"issue_token"}


# --- 401 ------------------------------------------------------------------------------------


def _url(path: str, ids) -> str:
    """`path` with its parameters filled in: `ids` is the `{id}`, or a dict of names to values."""
    for name, value in (ids if isinstance(ids, dict) else {"id": ids}).items():
        path = path.replace(f"{{{name}}}", str(value))
    return path


ANY_IDS = {"id": 1, "webhook_id": 1, "user_id": 1, "device_id": 1}


@pytest.mark.parametrize("operation_id", sorted(OPERATIONS))
def test_every_operation_needs_credentials(anonymous, operation_id):
    method, path, _ = OPERATIONS[operation_id]
    response = anonymous.request(method, _url(path, ANY_IDS))
    body = assert_problem(response, 401)
    assert response.headers["www-authenticate"] == 'Bearer realm="shopapi"'
    assert "bearer token" in body["detail"]


def _signed(payload, key=JWT_SECRET, algorithm="HS256"):
    return jwt.encode(payload, key, algorithm=algorithm)


def _unsigned(payload) -> str:
    """An `alg: none` token, which jose refuses to make."""
    return f"{segment({'alg': 'none', 'typ': 'JWT'})}.{segment(payload)}."


BAD_TOKENS = {
    "garbage": lambda: "not-a-jwt",
    "bad signature": lambda: _signed(claims(), key="another-secret-0123456789abcdef0123"),
    "alg none": lambda: _unsigned(claims()),
    "expired": lambda: _signed(claims(iat=int(time.time()) - 7200, exp=int(time.time()) - 3600)),
    "wrong audience": lambda: _signed(claims(aud="another-api")),
    "wrong issuer": lambda: _signed(claims(iss="https://evil.example.com")),
    "no exp": lambda: _signed(claims(exp=None)),
    "no iat": lambda: _signed(claims(iat=None)),
    "no aud": lambda: _signed(claims(aud=None)),
    "tampered scope": lambda: _tampered(_signed(claims(scope="products:read"))),
}


def _tampered(token: str) -> str:
    """The token with its payload swapped for one claiming every scope, signature kept."""
    header, _, signature = token.split(".")
    payload = _signed(claims()).split(".")[1]
    return f"{header}.{payload}.{signature}"


@pytest.mark.parametrize("case", sorted(BAD_TOKENS))
def test_a_bad_token_is_401_with_a_challenge(anonymous, case):
    response = anonymous.get(
        "/v1/products", headers={"Authorization": f"Bearer {BAD_TOKENS[case]()}"}
    )
    body = assert_problem(response, 401)
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith('Bearer realm="shopapi", error="invalid_token"')
    # The reason, as an RFC 9110 quoted-string.
    assert f'error_description="{body["detail"].replace(chr(34), chr(92) + chr(34))}"' in challenge


def test_a_token_whose_times_are_not_numbers_is_401_every_time(anonymous):
    """`exp`, `iat` and `nbf` are JSON numbers (RFC 7519 NumericDate). jose took a numeric
    string for one, and the token's kept claims then failed the next request with a 500; it
    failed on Infinity or a list itself."""
    now = int(time.time())
    times = {"exp": now + 300, "iat": now, "nbf": now}
    for claim, valid in times.items():
        for value in (str(valid), [valid], float("inf"), True):
            headers = {"Authorization": f"Bearer {_signed(claims(**{claim: value}))}"}
            for _ in range(2):  # the second time, a token of ours is checked from kept claims
                body = assert_problem(anonymous.get("/v1/products", headers=headers), 401)
                assert "must be numbers" in body["detail"], (claim, value)


def test_a_token_accepted_before_is_refused_once_it_expires(anonymous):
    """Tokens issued here are checked once and their claims kept (shopapi/auth/tokens.py); a kept
    token still expires. This one is past its exp but within the 30 s leeway for ~5 s: long
    enough for two requests on a busy machine."""
    now = time.time()
    token = _signed(claims(iat=int(now) - 60, exp=int(now - 25)))
    headers = {"Authorization": f"Bearer {token}"}
    assert anonymous.get("/v1/products", headers=headers).status_code == 200
    assert anonymous.get("/v1/products", headers=headers).status_code == 200  # the kept claims
    time.sleep(max(0.0, int(now - 25) + 30 - time.time()) + 0.5)
    body = assert_problem(anonymous.get("/v1/products", headers=headers), 401)
    assert body["detail"] == "The token has expired."


def test_the_same_claims_correctly_signed_are_accepted(anonymous):
    response = anonymous.get(
        "/v1/products", headers={"Authorization": f"Bearer {_signed(claims())}"}
    )
    assert response.status_code == 200


def test_a_malformed_authorization_header_is_401(anonymous):
    for value in ("Bearer", "Basic dXNlcjpwYXNz", "Token abc"):
        response = anonymous.get("/v1/products", headers={"Authorization": value})
        assert_problem(response, 401)
        assert response.headers["www-authenticate"].startswith('Bearer realm="shopapi"')


def _api_key(client, owner, scopes, **fields) -> dict:
    response = client.post(
        "/v1/api-keys",
        json={"name": "test key", "scopes": scopes, "owner_id": owner["id"], **fields},
    )
    assert response.status_code == 201, response.text
    return response.json()


def test_unknown_revoked_and_expired_api_keys_are_401(client, anonymous):
    owner = create_user(client, role="partner")
    revoked = _api_key(client, owner, ["products:read"])
    expired = _api_key(client, owner, ["products:read"])
    assert anonymous.get("/v1/products", headers={"X-API-Key": revoked["key"]}).status_code == 200
    assert client.delete(f"/v1/api-keys/{revoked['id']}").status_code == 204
    ApiKey.update(
        expires_at=datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=1)
    ).where(ApiKey.id == expired["id"]).execute()

    for key, reason in (
        ("shk_unknown", "not valid"),
        (revoked["key"] + "x", "not valid"),
        (revoked["key"], "revoked or has expired"),
        (expired["key"], "revoked or has expired"),
    ):
        response = anonymous.get("/v1/products", headers={"X-API-Key": key})
        body = assert_problem(response, 401)
        assert reason in body["detail"]
        assert 'error="invalid_token"' in response.headers["www-authenticate"]
        assert key not in response.text


def test_a_key_never_exceeds_its_owners_role(client, anonymous):
    owner = create_user(client, role="partner")
    key = _api_key(client, owner, ["products:read", "products:write"])["key"]
    new = {"sku": "DEMOTED-1", "name": "x", "price_cents": 1}
    client.patch(f"/v1/users/{owner['id']}", json={"role": "customer"})
    response = anonymous.post("/v1/products", json=new, headers={"X-API-Key": key})
    assert_problem(response, 403)
    assert anonymous.get("/v1/products", headers={"X-API-Key": key}).status_code == 200


# --- 403 ------------------------------------------------------------------------------------


def _scope_cases():
    return [
        (operation_id, scope)
        for operation_id, (_, _, scopes) in sorted(OPERATIONS.items())
        for scope in scopes
    ]


@pytest.mark.parametrize(("operation_id", "missing"), _scope_cases())
@pytest.mark.parametrize("scheme", ["bearer", "api_key"])
def test_a_missing_scope_is_403(client, anonymous, operation_id, missing, scheme):
    method, path, _ = OPERATIONS[operation_id]
    scopes = [s for s in SCOPES if s != missing]
    if scheme == "bearer":
        headers = bearer(scopes=scopes)
    else:
        admin = create_user(client, role="admin")
        headers = {"X-API-Key": _api_key(client, admin, scopes)["key"]}
    response = anonymous.request(method, _url(path, ANY_IDS), headers=headers)
    assert_problem(response, 403)
    required = " ".join(sorted(OPERATIONS[operation_id][2]))
    challenge = f'Bearer realm="shopapi", error="insufficient_scope", scope="{required}"'
    assert response.headers["www-authenticate"] == challenge


# --- 200 with the right credentials, for every operation -----------------------------------


def _order_of(admin, me) -> dict:
    product = create_product(admin)
    response = place_order(admin, me, (product, 1))
    assert response.status_code == 201, response.text
    return response.json()


def _finished_order_of(admin, me) -> dict:
    order = _order_of(admin, me)
    admin.patch(f"/v1/orders/{order['id']}", json={"status": "cancelled"})
    return order


def _client_id(admin) -> int:
    return admin.post("/v1/oauth/clients", json={"name": "c", "scopes": ["products:read"]}).json()[
        "id"
    ]


def _key_id(admin, me) -> int:
    return _api_key(admin, me, ["products:read"])["id"]


def _my_event_id(admin, me) -> int:
    params = {"type": "user.created", "resource_id": me["id"]}
    return admin.get("/v1/events", params=params).json()["data"][0]["id"]


def _my_webhook_id(admin, me) -> int:
    hook = {"url": "https://hooks.example.com/x", "events": ["user.created"]}
    response = admin.post("/v1/webhooks", json=hook, headers=bearer_for(me))
    assert response.status_code == 201, response.text
    return response.json()["id"]


def _my_device(admin, me) -> dict:
    """The path ids of a device of `me`'s, registered by an admin."""
    body = {"platform": "fcm", "token": f"security-{me['id']}"}
    response = admin.post(f"/v1/users/{me['id']}/devices", json=body)
    assert response.status_code == 201, response.text
    return {"user_id": me["id"], "id": response.json()["id"]}


def _my_delivery_ids(admin, me) -> dict:
    webhook_id = _my_webhook_id(admin, me)
    response = admin.post(
        f"/v1/webhooks/{webhook_id}/deliveries",
        json={"event_id": _my_event_id(admin, me)},
        headers=bearer_for(me),
    )
    return {"webhook_id": webhook_id, "id": response.json()["id"]}


# operationId -> (admin client, the acting user) -> (path id or None, body or None)
CASES = {
    "list_users": lambda admin, me: (None, None),
    "create_user": lambda admin, me: (
        None,
        {"email": "new@example.com", "name": "N", "password": "12345678"},
    ),
    "get_user": lambda admin, me: (me["id"], None),
    "replace_user": lambda admin, me: (
        me["id"],
        {
            "email": me["email"],
            "name": "R",
            "password": "12345678",
            "current_password": "correct horse",  # helpers.create_user's
        },
    ),
    "update_user": lambda admin, me: (me["id"], {"name": "Renamed"}),
    "delete_user": lambda admin, me: (me["id"], None),
    "list_user_orders": lambda admin, me: (me["id"], None),
    "list_products": lambda admin, me: (None, None),
    "create_product": lambda admin, me: (None, {"sku": "NEW-1", "name": "N", "price_cents": 1}),
    "get_product": lambda admin, me: (create_product(admin)["id"], None),
    "replace_product": lambda admin, me: (
        create_product(admin)["id"],
        {"sku": "REPLACED-1", "name": "R", "price_cents": 2},
    ),
    "update_product": lambda admin, me: (create_product(admin)["id"], {"name": "Renamed"}),
    "delete_product": lambda admin, me: (create_product(admin)["id"], None),
    "list_orders": lambda admin, me: (None, None),
    "create_order": lambda admin, me: (
        None,
        {
            "user_id": me["id"],
            "items": [{"product_id": create_product(admin)["id"], "quantity": 1}],
        },
    ),
    "get_order": lambda admin, me: (_order_of(admin, me)["id"], None),
    "replace_order": lambda admin, me: (_order_of(admin, me)["id"], {"status": "cancelled"}),
    "update_order": lambda admin, me: (_order_of(admin, me)["id"], {"note": "leave at the door"}),
    "delete_order": lambda admin, me: (_finished_order_of(admin, me)["id"], None),
    "list_oauth_clients": lambda admin, me: (None, None),
    "register_oauth_client": lambda admin, me: (None, {"name": "ERP", "scopes": ["products:read"]}),
    "get_oauth_client": lambda admin, me: (_client_id(admin), None),
    "delete_oauth_client": lambda admin, me: (_client_id(admin), None),
    "list_api_keys": lambda admin, me: (None, None),
    "create_api_key": lambda admin, me: (None, {"name": "k", "scopes": ["products:read"]}),
    "get_api_key": lambda admin, me: (_key_id(admin, me), None),
    "revoke_api_key": lambda admin, me: (_key_id(admin, me), None),
    "list_events": lambda admin, me: (None, None),
    "get_event": lambda admin, me: (_my_event_id(admin, me), None),
    "list_webhooks": lambda admin, me: (None, None),
    "create_webhook": lambda admin, me: (
        None,
        {"url": "https://hooks.example.com/x", "events": ["order.created"]},
    ),
    "get_webhook": lambda admin, me: (_my_webhook_id(admin, me), None),
    "update_webhook": lambda admin, me: (_my_webhook_id(admin, me), {"enabled": False}),
    "delete_webhook": lambda admin, me: (_my_webhook_id(admin, me), None),
    "list_webhook_deliveries": lambda admin, me: ({"webhook_id": _my_webhook_id(admin, me)}, None),
    "redeliver": lambda admin, me: (
        {"webhook_id": _my_webhook_id(admin, me)},
        {"event_id": _my_event_id(admin, me)},
    ),
    "get_webhook_delivery": lambda admin, me: (_my_delivery_ids(admin, me), None),
    "list_devices": lambda admin, me: ({"user_id": me["id"]}, None),
    # Registered already: the same token again is 200, the operation's first success status.
    "register_device": lambda admin, me: (
        {"user_id": _my_device(admin, me)["user_id"]},
        {"platform": "fcm", "token": f"security-{me['id']}"},
    ),
    "get_device": lambda admin, me: (_my_device(admin, me), None),
    "delete_device": lambda admin, me: (_my_device(admin, me), None),
    "list_device_deliveries": lambda admin, me: (
        {"user_id": me["id"], "device_id": _my_device(admin, me)["id"]},
        None,
    ),
    "get_vapid_public_key": lambda admin, me: (None, None),
}
# The feed declares no scope: what it shows depends on the caller's read scopes, and an event
# is found only with the read scope of its resource (an API key holds at least one scope).
# The Web Push key declares none either (any caller may subscribe a browser).
SEEING = {
    "get_event": ["users:read"],
    "list_events": ["products:read"],
    "get_vapid_public_key": ["users:read"],
}


# Operations whose success a test client cannot read here, and the test that proves it instead:
# a stream never ends, and the Connexion test client reads a whole response.
ELSEWHERE = {
    "stream_events": "test_event_stream.py::test_a_partners_api_key_streams_what_its_scopes_read"
}


def test_every_secured_operation_has_a_case():
    assert set(CASES) | set(ELSEWHERE) == set(OPERATIONS)


def _role_for(scopes) -> str:
    if "admin" in scopes:
        return "admin"
    return "partner" if {"products:write", "webhooks"} & set(scopes) else "customer"


@pytest.mark.parametrize("operation_id", sorted(CASES))
@pytest.mark.parametrize("scheme", ["bearer", "api_key"])
def test_the_right_credentials_succeed_with_exactly_the_declared_scopes(
    client, anonymous, operation_id, scheme
):
    method, path, scopes = OPERATIONS[operation_id]
    scopes = [*scopes, *SEEING.get(operation_id, ())]
    me = create_user(client, role=_role_for(scopes))
    ids, body = CASES[operation_id](client, me)
    if scheme == "bearer":
        headers = bearer(str(me["id"]), scopes)
    else:
        headers = {"X-API-Key": _api_key(client, me, scopes)["key"]}
    response = anonymous.request(method, _url(path, ids), json=body, headers=headers)
    assert response.status_code == _success_status(operation_id), response.text


# --- ownership ------------------------------------------------------------------------------


@pytest.fixture
def two_customers(client):
    product = create_product(client, stock=100)
    ann, bob = create_user(client), create_user(client)
    orders = {
        name: place_order(client, user, (product, 1)).json()
        for name, user in (("ann", ann), ("bob", bob))
    }
    return ann, bob, orders, product


def test_a_customer_sees_only_their_own_orders(anonymous, two_customers):
    ann, bob, orders, _ = two_customers
    as_ann = bearer_for(ann)
    listed = anonymous.get("/v1/orders", headers=as_ann).json()
    assert [o["id"] for o in listed["data"]] == [orders["ann"]["id"]]
    assert listed["meta"]["total"] == 1
    bobs = f"/v1/orders/{orders['bob']['id']}"
    for method, body in (
        ("GET", None),
        ("PATCH", {"note": "x"}),
        ("PUT", {"status": "cancelled"}),
        ("DELETE", None),
    ):
        response = anonymous.request(method, bobs, json=body, headers=as_ann)
        assert_problem(response, 404)
    assert_problem(anonymous.get(f"/v1/users/{bob['id']}/orders", headers=as_ann), 404)
    own = anonymous.get(f"/v1/users/{ann['id']}/orders", headers=as_ann).json()
    assert [o["id"] for o in own["data"]] == [orders["ann"]["id"]]


def test_another_customers_order_looks_exactly_like_a_missing_one(anonymous, two_customers):
    ann, _, orders, _ = two_customers
    theirs = anonymous.get(f"/v1/orders/{orders['bob']['id']}", headers=bearer_for(ann)).json()
    missing = anonymous.get("/v1/orders/999999", headers=bearer_for(ann)).json()
    for body in (theirs, missing):
        body.pop("instance"), body.pop("request_id")
    assert theirs == missing


def test_a_customer_sees_and_changes_only_their_own_user_record(anonymous, two_customers):
    ann, bob, _, _ = two_customers
    as_ann = bearer_for(ann)
    listed = anonymous.get("/v1/users", headers=as_ann).json()["data"]
    assert [u["id"] for u in listed] == [ann["id"]]
    for method, body in (("GET", None), ("PATCH", {"name": "x"}), ("DELETE", None)):
        assert_problem(
            anonymous.request(method, f"/v1/users/{bob['id']}", json=body, headers=as_ann), 404
        )
    response = anonymous.patch(f"/v1/users/{ann['id']}", json={"name": "Ann B."}, headers=as_ann)
    assert response.status_code == 200
    assert response.json()["name"] == "Ann B."


def test_only_an_admin_sets_a_role(client, anonymous, two_customers):
    ann, _, _, _ = two_customers
    as_ann = bearer_for(ann)
    for method, body in (
        ("PATCH", {"role": "admin"}),
        ("PUT", {"email": ann["email"], "name": "A", "password": "12345678", "role": "admin"}),
    ):
        body = assert_problem(
            anonymous.request(method, f"/v1/users/{ann['id']}", json=body, headers=as_ann), 403
        )
        assert "admin" in body["detail"]
    assert client.get(f"/v1/users/{ann['id']}").json()["role"] == "customer"
    # Restating the current role, or leaving it out of a PUT, is not a change. (A PUT of your
    # own record restates the password too: it takes the current one, tests/test_revocation.py.)
    same = {
        "email": ann["email"],
        "name": "A",
        "password": "correct horse",
        "current_password": "correct horse",
        "role": "customer",
    }
    assert anonymous.put(f"/v1/users/{ann['id']}", json=same, headers=as_ann).status_code == 200
    partner = create_user(client, role="partner")
    without_role = {
        "email": partner["email"],
        "name": "P",
        "password": "correct horse",
        "current_password": "correct horse",
    }
    response = anonymous.put(
        f"/v1/users/{partner['id']}", json=without_role, headers=bearer_for(partner)
    )
    assert response.json()["role"] == "partner"
    response = client.patch(f"/v1/users/{ann['id']}", json={"role": "partner"})
    assert response.json()["role"] == "partner"


def test_a_customer_orders_for_themselves_and_may_cancel_but_not_ship(anonymous, two_customers):
    ann, bob, orders, product = two_customers
    as_ann = bearer_for(ann)
    for_bob = {"user_id": bob["id"], "items": [{"product_id": product["id"], "quantity": 1}]}
    assert_problem(anonymous.post("/v1/orders", json=for_bob, headers=as_ann), 403)
    mine = f"/v1/orders/{orders['ann']['id']}"
    for status in ("paid", "shipped", "delivered"):
        assert_problem(anonymous.patch(mine, json={"status": status}, headers=as_ann), 403)
    response = anonymous.patch(mine, json={"status": "cancelled"}, headers=as_ann)
    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"


def test_an_admin_reaches_every_users_records(client, two_customers):
    _, bob, orders, _ = two_customers
    assert client.get(f"/v1/orders/{orders['bob']['id']}").status_code == 200
    assert client.get("/v1/orders").json()["meta"]["total"] == 2
    assert client.get(f"/v1/users/{bob['id']}").status_code == 200


def test_a_caller_acting_for_no_user_reaches_no_users_records(anonymous, two_customers):
    """An OAuth client (or an external system) without `admin` owns nothing."""
    as_client = bearer("client:erp", ["orders:read", "users:read"])
    assert anonymous.get("/v1/orders", headers=as_client).json()["data"] == []
    assert anonymous.get("/v1/users", headers=as_client).json()["data"] == []
    _, _, orders, _ = two_customers
    assert_problem(anonymous.get(f"/v1/orders/{orders['ann']['id']}", headers=as_client), 404)
