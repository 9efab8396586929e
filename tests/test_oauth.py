"""The OAuth 2.0 token endpoint: the password, client_credentials and refresh_token grants,
RFC 6749 errors, and tokens that then work (or stop working) on the API."""

import base64
import datetime
import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from support.helpers import bearer, create_user
from support.live import ALL_AT_ONCE, live_server

import models.passwords
from models import RefreshToken
from models.fields import utc_now
from models.refresh_token import REUSE_GRACE_SECONDS

TOKEN = "/v1/oauth/token"


def _password_grant(anonymous, email, password, **extra):
    return anonymous.post(
        TOKEN, data={"grant_type": "password", "username": email, "password": password, **extra}
    )


def _as(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def _assert_oauth_error(response, status: int, error: str) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert body["error"] == error
    return body


def _refresh(anonymous, refresh_token: str):
    return anonymous.post(
        TOKEN, data={"grant_type": "refresh_token", "refresh_token": refresh_token}
    )


def _after_the_grace() -> None:
    """As if the refresh tokens used so far had been used longer ago than the grace given to
    concurrent refreshes."""
    long_ago = utc_now() - datetime.timedelta(seconds=REUSE_GRACE_SECONDS + 1)
    RefreshToken.update(used_at=long_ago).where(RefreshToken.used_at.is_null(False)).execute()


@pytest.fixture
def customer(client):
    return create_user(client, email="carol@example.com", password="carol-password")


def test_the_password_grant_gives_a_working_token_for_the_users_role(anonymous, customer):
    response = _password_grant(anonymous, "Carol@Example.com", "carol-password")
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert body["token_type"] == "Bearer"
    assert body["expires_in"] == 900
    assert body["refresh_token"].startswith("shr_")
    assert set(body["scope"].split()) == {
        "users:read",
        "users:write",
        "products:read",
        "orders:read",
        "orders:write",
    }
    me = anonymous.get(f"/v1/users/{customer['id']}", headers=_as(body["access_token"]))
    assert me.status_code == 200
    assert (
        anonymous.post("/v1/products", json={}, headers=_as(body["access_token"])).status_code
        == 403
    )


def test_a_wrong_password_and_an_unknown_email_get_one_answer_by_one_path(
    anonymous, customer, monkeypatch
):
    hashed = []
    original = models.passwords._scrypt
    monkeypatch.setattr(
        models.passwords, "_scrypt", lambda *a: hashed.append(a[2:]) or original(*a)
    )
    wrong = _password_grant(anonymous, "carol@example.com", "not-her-password")
    assert len(hashed) == 1
    unknown = _password_grant(anonymous, "nobody@example.com", "not-her-password")
    # The unknown email is checked against a hash too, at the same cost: timing does not tell
    # which emails exist.
    assert len(hashed) == 2
    assert hashed[0] == hashed[1]
    for response in (wrong, unknown):
        _assert_oauth_error(response, 400, "invalid_grant")
    assert wrong.json() == unknown.json()


def test_a_token_can_be_narrowed_but_not_widened(anonymous, customer):
    narrow = _password_grant(
        anonymous, "carol@example.com", "carol-password", scope="products:read"
    )
    assert narrow.json()["scope"] == "products:read"
    token = narrow.json()["access_token"]
    assert anonymous.get("/v1/products", headers=_as(token)).status_code == 200
    assert anonymous.get("/v1/orders", headers=_as(token)).status_code == 403

    wide = _password_grant(anonymous, "carol@example.com", "carol-password", scope="admin")
    assert "admin" in _assert_oauth_error(wide, 400, "invalid_scope")["error_description"]
    unknown = _password_grant(anonymous, "carol@example.com", "carol-password", scope="root")
    _assert_oauth_error(unknown, 400, "invalid_scope")


def test_a_refresh_token_is_used_once_and_its_reuse_revokes_the_login(anonymous, customer):
    first = _password_grant(anonymous, "carol@example.com", "carol-password").json()
    refresh = {"grant_type": "refresh_token", "refresh_token": first["refresh_token"]}
    second = anonymous.post(TOKEN, data=refresh)
    assert second.status_code == 200, second.text
    second = second.json()
    assert second["refresh_token"] != first["refresh_token"]
    assert anonymous.get("/v1/orders", headers=_as(second["access_token"])).status_code == 200

    # The first refresh token again, after the grace for concurrent refreshes: someone else has
    # it. Refused, and so is the successor.
    _after_the_grace()
    reused = anonymous.post(TOKEN, data=refresh)
    assert "used already" in _assert_oauth_error(reused, 400, "invalid_grant")["error_description"]
    successor = {"grant_type": "refresh_token", "refresh_token": second["refresh_token"]}
    _assert_oauth_error(anonymous.post(TOKEN, data=successor), 400, "invalid_grant")
    # A new login is a new family, unaffected.
    again = _password_grant(anonymous, "carol@example.com", "carol-password").json()
    fresh = {"grant_type": "refresh_token", "refresh_token": again["refresh_token"]}
    assert anonymous.post(TOKEN, data=fresh).status_code == 200


def test_the_reuse_of_a_refresh_token_revokes_the_access_tokens_of_its_login_only(
    client, anonymous, customer
):
    """ "Every token of its login is now revoked" is true of its access tokens too: those of
    that login are refused (401), the user's other logins and other users' keep working."""
    first = _password_grant(anonymous, "carol@example.com", "carol-password").json()
    second = _refresh(anonymous, first["refresh_token"]).json()
    other_login = _password_grant(anonymous, "carol@example.com", "carol-password").json()
    other_user = create_user(client, email="dave@example.com", password="dave-password")
    others = _password_grant(anonymous, other_user["email"], "dave-password").json()
    for tokens in (first, second, other_login, others):
        assert anonymous.get("/v1/orders", headers=_as(tokens["access_token"])).status_code == 200

    _after_the_grace()
    reused = _refresh(anonymous, first["refresh_token"])
    assert "every token of its login" in reused.json()["error_description"]
    for tokens in (first, second):
        response = anonymous.get("/v1/orders", headers=_as(tokens["access_token"]))
        assert response.status_code == 401, response.text
        assert response.headers["content-type"] == "application/problem+json"
        assert "revoked" in response.json()["detail"]
        assert "used twice" in response.json()["detail"]
    for tokens in (other_login, others):
        assert anonymous.get("/v1/orders", headers=_as(tokens["access_token"])).status_code == 200
    assert _refresh(anonymous, other_login["refresh_token"]).status_code == 200


def test_concurrent_refreshes_within_the_grace_get_the_same_pair(anonymous, customer):
    """Two requests of one client refreshing with the same token at once (two tabs, a retry
    after a lost answer) both get the successor, and the login goes on."""
    login = _password_grant(anonymous, "carol@example.com", "carol-password").json()
    first = _refresh(anonymous, login["refresh_token"])
    again = _refresh(anonymous, login["refresh_token"])
    assert first.status_code == again.status_code == 200, again.text
    assert again.json() == first.json()
    pair = first.json()
    assert pair["refresh_token"] != login["refresh_token"]
    assert anonymous.get("/v1/orders", headers=_as(pair["access_token"])).status_code == 200
    assert anonymous.get("/v1/orders", headers=_as(login["access_token"])).status_code == 200
    following = _refresh(anonymous, pair["refresh_token"])
    assert following.status_code == 200, following.text
    assert (
        anonymous.get("/v1/orders", headers=_as(following.json()["access_token"])).status_code
        == 200
    )


def test_a_refresh_within_the_grace_of_a_revoked_login_is_refused(client, anonymous, customer):
    login = _password_grant(anonymous, "carol@example.com", "carol-password").json()
    assert _refresh(anonymous, login["refresh_token"]).status_code == 200
    change = {"password": "another password"}
    assert client.patch(f"/v1/users/{customer['id']}", json=change).status_code == 200
    refused = _refresh(anonymous, login["refresh_token"])
    body = _assert_oauth_error(refused, 400, "invalid_grant")
    assert "refresh_token" not in body


def test_a_refresh_keeps_the_logins_scopes_and_may_narrow_the_access_token(anonymous, customer):
    login = _password_grant(
        anonymous, "carol@example.com", "carol-password", scope="orders:read products:read"
    ).json()
    too_wide = {
        "grant_type": "refresh_token",
        "refresh_token": login["refresh_token"],
        "scope": "orders:write",
    }
    _assert_oauth_error(anonymous.post(TOKEN, data=too_wide), 400, "invalid_scope")
    # Refused before use: the refresh token still works.
    narrower = {**too_wide, "scope": "orders:read"}
    response = anonymous.post(TOKEN, data=narrower)
    assert response.status_code == 200, response.text
    assert response.json()["scope"] == "orders:read"


def test_an_unknown_refresh_token_is_invalid_grant(anonymous):
    response = anonymous.post(
        TOKEN, data={"grant_type": "refresh_token", "refresh_token": "shr_nope"}
    )
    _assert_oauth_error(response, 400, "invalid_grant")


@pytest.fixture
def erp(client):
    response = client.post(
        "/v1/oauth/clients", json={"name": "ERP", "scopes": ["products:read", "products:write"]}
    )
    assert response.status_code == 201, response.text
    assert response.headers["location"] == f"/v1/oauth/clients/{response.json()['id']}"
    return response.json()


def test_client_credentials_by_basic_auth_or_form(anonymous, erp):
    basic = base64.b64encode(f"{erp['client_id']}:{erp['client_secret']}".encode()).decode()
    by_header = anonymous.post(
        TOKEN,
        data={"grant_type": "client_credentials"},
        headers={"Authorization": f"Basic {basic}"},
    )
    by_form = anonymous.post(
        TOKEN,
        data={
            "grant_type": "client_credentials",
            "client_id": erp["client_id"],
            "client_secret": erp["client_secret"],
            "scope": "products:read",
        },
    )
    for response in (by_header, by_form):
        assert response.status_code == 200, response.text
        assert "refresh_token" not in response.json()
    assert by_header.json()["scope"] == "products:read products:write"
    assert by_form.json()["scope"] == "products:read"
    new = {"sku": "ERP-1", "name": "From the ERP", "price_cents": 100}
    token = by_header.json()["access_token"]
    assert anonymous.post("/v1/products", json=new, headers=_as(token)).status_code == 201


def test_a_wrong_client_secret_is_invalid_client(anonymous, erp):
    basic = base64.b64encode(f"{erp['client_id']}:wrong".encode()).decode()
    response = anonymous.post(
        TOKEN,
        data={"grant_type": "client_credentials"},
        headers={"Authorization": f"Basic {basic}"},
    )
    _assert_oauth_error(response, 401, "invalid_client")
    assert response.headers["www-authenticate"] == 'Basic realm="shopapi"'
    by_form = anonymous.post(
        TOKEN,
        data={
            "grant_type": "client_credentials",
            "client_id": erp["client_id"],
            "client_secret": "x",
        },
    )
    _assert_oauth_error(by_form, 401, "invalid_client")
    no_client = anonymous.post(TOKEN, data={"grant_type": "client_credentials"})
    _assert_oauth_error(no_client, 401, "invalid_client")


def test_a_removed_client_gets_no_more_tokens(client, anonymous, erp):
    assert client.delete(f"/v1/oauth/clients/{erp['id']}").status_code == 204
    response = anonymous.post(
        TOKEN,
        data={
            "grant_type": "client_credentials",
            "client_id": erp["client_id"],
            "client_secret": erp["client_secret"],
        },
    )
    _assert_oauth_error(response, 401, "invalid_client")


def test_clients_are_listed_without_secrets(client, erp):
    listed = client.get("/v1/oauth/clients").json()["data"]
    assert [c["client_id"] for c in listed] == [erp["client_id"]]
    assert "client_secret" not in client.get(f"/v1/oauth/clients/{erp['id']}").json()
    assert erp["client_secret"] not in client.get("/v1/oauth/clients").text


@pytest.mark.parametrize(
    ("form", "error"),
    [
        ({"scope": "products:read"}, "invalid_request"),
        ({"grant_type": "implicit"}, "unsupported_grant_type"),
        ({"grant_type": "password", "username": "carol@example.com"}, "invalid_request"),
        ({"grant_type": "refresh_token"}, "invalid_request"),
    ],
)
def test_malformed_token_requests_get_rfc6749_errors(anonymous, form, error):
    _assert_oauth_error(anonymous.post(TOKEN, data=form), 400, error)


@pytest.mark.parametrize("version", ["v1", "v2", "v3"])
def test_the_contract_requires_a_grant_type_it_names(anonymous, version):
    """Generated clients and Swagger UI's example mode make grant_type a required choice, not an
    optional text; the grants' own parameters are told in each one's description."""
    schemas = anonymous.get(f"/{version}/openapi.json").json()["components"]["schemas"]
    request = schemas["TokenRequest"]
    assert request["required"] == ["grant_type"]
    grant_type = request["properties"]["grant_type"]
    assert grant_type["enum"] == ["password", "client_credentials", "refresh_token"]


def test_unknown_token_request_parameters_are_ignored(anonymous, customer):
    response = _password_grant(
        anonymous, "carol@example.com", "carol-password", state="xyz", foo="bar"
    )
    assert response.status_code == 200, response.text


def test_no_secret_reaches_a_log_line(anonymous, customer, erp, caplog):
    caplog.set_level(logging.DEBUG)
    token = _password_grant(anonymous, "carol@example.com", "carol-password").json()
    _password_grant(anonymous, "carol@example.com", "wrong-password-here")
    anonymous.get("/v1/orders", headers=_as(token["access_token"] + "x"))
    anonymous.get("/v1/orders", headers={"X-API-Key": "shk_guessed-key-value"})
    anonymous.post(
        TOKEN, data={"grant_type": "refresh_token", "refresh_token": token["refresh_token"]}
    )
    too_long = "carol-password" * 50
    refused = _password_grant(anonymous, "carol@example.com", too_long, client_secret=too_long)
    assert refused.status_code == 400
    assert too_long not in refused.text
    logged = "\n".join(record.getMessage() for record in caplog.records)
    for secret in (
        "carol-password",
        too_long,
        "wrong-password-here",
        token["access_token"],
        token["refresh_token"],
        "shk_guessed-key-value",
        erp["client_secret"],
    ):
        assert secret not in logged


def test_a_token_request_without_a_form_is_a_problem(anonymous):
    assert anonymous.post(TOKEN).status_code == 400
    response = anonymous.post(TOKEN, json={"grant_type": "password"})
    assert response.status_code == 415


def test_an_empty_basic_client_is_no_client(anonymous, customer):
    """Swagger UI sends `Authorization: Basic Og==` (":") when its client fields are blank."""
    response = anonymous.post(
        TOKEN,
        data={
            "grant_type": "password",
            "username": "carol@example.com",
            "password": "carol-password",
        },
        headers={"Authorization": "Basic Og=="},
    )
    assert response.status_code == 200, response.text


@pytest.mark.slow
def test_refreshes_racing_on_a_real_server_all_get_the_same_pair(app, database_url):
    """Eight requests refresh with one token at the same moment, on a server with its real
    thread pool: one wins the token's compare-and-set, the others find it used within the
    grace; all answer the one successor pair, and the login goes on."""
    racers = 8
    with (
        live_server(database_url, **ALL_AT_ONCE) as base,
        httpx.Client(base_url=base, timeout=60) as http,
    ):
        user = http.post(
            "/v1/users",
            json={"email": "racer@example.com", "name": "R", "password": "racer-password"},
            headers=bearer(),
        )
        assert user.status_code == 201, user.text
        login = _password_grant(http, "racer@example.com", "racer-password").json()
        start = threading.Barrier(racers)

        def refresh(_):
            with httpx.Client(base_url=base, timeout=60) as own:
                start.wait()
                return _refresh(own, login["refresh_token"])

        with ThreadPoolExecutor(max_workers=racers) as pool:
            answers = list(pool.map(refresh, range(racers)))
        assert [a.status_code for a in answers] == [200] * racers, [a.text for a in answers]
        pairs = {(a.json()["access_token"], a.json()["refresh_token"]) for a in answers}
        assert len(pairs) == 1
        ((access, refresh_token),) = pairs
        assert http.get("/v1/orders", headers=_as(access)).status_code == 200
        assert _refresh(http, refresh_token).status_code == 200
