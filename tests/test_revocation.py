"""What a user was issued stops working when the user changes: deleting a user, or changing
their password, email or role, revokes their access tokens (401, on every process) and their
refresh tokens; and changing one's own password or email takes the current password."""

import datetime
import threading
import time

import httpx
import pytest
from jose import jwt
from support.helpers import assert_problem, bearer_for, create_user
from support.live import live_server

from models import RefreshToken, Revocation, User
from models.db import database
from models.errors import CurrentPasswordRequired
from models.fields import utc_now
from models.refresh_token import REUSE_GRACE_SECONDS
from models.user import CredentialsChange

TOKEN = "/v1/oauth/token"
PASSWORD = "correct horse"  # helpers.create_user's
# How long another process may take to refuse a revoked token: it rereads the revocations at
# least every second (shopapi/auth/revocations.py); the rest is room for a busy machine.
PROPAGATION_DEADLINE_SECONDS = 30


def _login(anonymous, user: dict, password: str = PASSWORD) -> dict:
    response = anonymous.post(
        TOKEN, data={"grant_type": "password", "username": user["email"], "password": password}
    )
    assert response.status_code == 200, response.text
    return response.json()


def _refresh(anonymous, refresh_token: str):
    return anonymous.post(
        TOKEN, data={"grant_type": "refresh_token", "refresh_token": refresh_token}
    )


def _as(login: dict) -> dict:
    return {"Authorization": f"Bearer {login['access_token']}"}


def _assert_revoked(response) -> None:
    body = assert_problem(response, 401)
    assert "revoked" in body["detail"]
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith('Bearer realm="shopapi"')
    assert 'error="invalid_token"' in challenge
    assert "revoked" in challenge


def _works(anonymous, login: dict) -> bool:
    status = anonymous.get("/v1/products", headers=_as(login)).status_code
    assert status in (200, 401), status
    return status == 200


def _user_url(user: dict) -> str:
    return f"/v1/users/{user['id']}"


# --- 2: access tokens -------------------------------------------------------------------------


def test_a_deleted_users_token_is_refused(client, anonymous):
    user = create_user(client)
    login = _login(anonymous, user)
    assert _works(anonymous, login)
    assert client.delete(_user_url(user)).status_code == 204
    _assert_revoked(anonymous.get("/v1/products", headers=_as(login)))


def test_a_demoted_admins_token_cannot_make_an_admin_and_a_new_token_has_the_new_role(
    client, anonymous
):
    mallory = create_user(client, role="admin")
    old = _login(anonymous, mallory)
    demoted = client.patch(_user_url(mallory), json={"role": "customer"})
    assert demoted.status_code == 200
    new_admin = {"email": "minion@example.com", "name": "M", "password": PASSWORD, "role": "admin"}
    _assert_revoked(anonymous.post("/v1/users", json=new_admin, headers=_as(old)))
    assert client.get("/v1/users?email=minion@example.com").json()["data"] == []
    # Logging in again gives a token of the current role: a customer's.
    new = _login(anonymous, mallory)
    assert "admin" not in new["scope"].split()
    assert_problem(anonymous.post("/v1/users", json=new_admin, headers=_as(new)), 403)
    assert anonymous.get(_user_url(mallory), headers=_as(new)).status_code == 200


def test_a_password_change_refuses_the_tokens_issued_before_it_and_not_those_after(
    client, anonymous
):
    user = create_user(client)
    earlier = _login(anonymous, user)
    just_before = _login(anonymous, user)
    change = {"password": "a new password", "current_password": PASSWORD}
    assert anonymous.patch(_user_url(user), json=change, headers=_as(earlier)).status_code == 200
    just_after = _login(anonymous, user, "a new password")
    for login in (earlier, just_before):
        _assert_revoked(anonymous.get("/v1/products", headers=_as(login)))
    assert _works(anonymous, just_after)
    # Tokens carry the user's credentials version, not a time: those of one second, or even
    # with a later `iat` than the change, are told apart all the same.
    claims = [
        jwt.get_unverified_claims(login["access_token"]) for login in (just_before, just_after)
    ]
    assert claims[1]["cred_ver"] == claims[0]["cred_ver"] + 1
    assert claims[1]["iat"] - claims[0]["iat"] <= 60


def test_an_email_change_revokes_and_a_name_change_does_not(client, anonymous):
    user = create_user(client)
    login = _login(anonymous, user)
    assert client.patch(_user_url(user), json={"name": "Renamed"}).status_code == 200
    assert _works(anonymous, login)
    # Restating the email in another case is no change either (emails are kept lower-cased).
    same_email = {"email": user["email"].upper()}
    assert client.patch(_user_url(user), json=same_email).status_code == 200
    assert _works(anonymous, login)
    assert client.patch(_user_url(user), json={"email": "new@example.com"}).status_code == 200
    _assert_revoked(anonymous.get("/v1/products", headers=_as(login)))


def test_only_the_changed_users_tokens_are_revoked(client, anonymous):
    ann, bob = create_user(client), create_user(client)
    anns, bobs = _login(anonymous, ann), _login(anonymous, bob)
    assert client.patch(_user_url(ann), json={"password": "another password"}).status_code == 200
    _assert_revoked(anonymous.get("/v1/products", headers=_as(anns)))
    assert _works(anonymous, bobs)
    # The admin client's own token (an OAuth client's, acting for no user) is untouched.
    assert client.get("/v1/products").status_code == 200


def test_a_change_that_fails_revokes_nothing(client, anonymous):
    user, other = create_user(client), create_user(client)
    login = _login(anonymous, user)
    taken = client.patch(_user_url(user), json={"email": other["email"], "password": "x" * 8})
    assert_problem(taken, 409)
    assert _works(anonymous, login)
    stale = client.patch(
        _user_url(user), json={"password": "y" * 8}, headers={"If-Match": '"stale"'}
    )
    assert_problem(stale, 412)
    assert _works(anonymous, login)


def test_a_token_of_a_user_with_orders_survives_a_refused_deletion(client, anonymous):
    from support.helpers import create_product, place_order

    user = create_user(client)
    assert place_order(client, user, (create_product(client), 1)).status_code == 201
    login = _login(anonymous, user)
    assert_problem(client.delete(_user_url(user)), 409)
    assert _works(anonymous, login)


@pytest.mark.slow
def test_another_process_refuses_a_revoked_token_within_seconds(client, anonymous, database_url):
    """The change is made here; a separate server process on the same database learns of it
    only through the revocation table."""
    user = create_user(client)
    login = _login(anonymous, user)
    with live_server(database_url) as base, httpx.Client(base_url=base, timeout=30) as other:
        assert other.get("/v1/products", headers=_as(login)).status_code == 200
        assert client.patch(_user_url(user), json={"role": "partner"}).status_code == 200
        deadline = time.monotonic() + PROPAGATION_DEADLINE_SECONDS
        while (response := other.get("/v1/products", headers=_as(login))).status_code == 200:
            assert time.monotonic() < deadline, "the other process still accepts the token"
            time.sleep(0.05)
        assert response.status_code == 401
        assert "revoked" in response.json()["detail"]
        # A new login works there at once, with the new role.
        new = _login(anonymous, user)
        assert other.post("/v1/products", json={}, headers=_as(new)).status_code != 401


@pytest.mark.slow
def test_another_process_refuses_the_tokens_of_a_login_ended_by_a_reuse(
    client, anonymous, database_url
):
    """A refresh token used twice (after the grace for concurrent refreshes) ends its login
    here; another server process refuses that login's access tokens within seconds, and only
    those."""
    user = create_user(client)
    login, other_login = _login(anonymous, user), _login(anonymous, user)
    successor = _refresh(anonymous, login["refresh_token"]).json()
    with live_server(database_url) as base, httpx.Client(base_url=base, timeout=30) as other:
        for tokens in (login, successor, other_login):
            assert other.get("/v1/products", headers=_as(tokens)).status_code == 200
        long_ago = utc_now() - datetime.timedelta(seconds=REUSE_GRACE_SECONDS + 1)
        RefreshToken.update(used_at=long_ago).where(RefreshToken.used_at.is_null(False)).execute()
        assert _refresh(anonymous, login["refresh_token"]).status_code == 400
        for tokens in (login, successor):
            deadline = time.monotonic() + PROPAGATION_DEADLINE_SECONDS
            while (response := other.get("/v1/products", headers=_as(tokens))).status_code == 200:
                assert time.monotonic() < deadline, "the other process still accepts the token"
                time.sleep(0.05)
            _assert_revoked(response)
            assert "used twice" in response.json()["detail"]
        assert other.get("/v1/products", headers=_as(other_login)).status_code == 200


def test_on_postgresql_revocations_become_visible_in_id_order(app, database_url):
    """Every process reads the revocations after the last id it saw, so a row must never become
    visible after one with a higher id: recording waits for any other recording transaction to
    end (PostgreSQL hands out ids before commit; SQLite has one writer at a time anyway)."""
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite serialises every write transaction")
    with database.connection_context():
        ann, bob = (User.create(email=f"{n}@example.com", name=n, password_hash="-") for n in "ab")
    ann_recorded, release = threading.Event(), threading.Event()

    def record(user, hold: bool):
        with database.connection_context(), database.atomic():
            Revocation.record(user)
            if hold:
                ann_recorded.set()
                release.wait(PROPAGATION_DEADLINE_SECONDS)

    first = threading.Thread(target=record, args=(ann, True))
    first.start()
    try:
        assert ann_recorded.wait(PROPAGATION_DEADLINE_SECONDS)
        second = threading.Thread(target=record, args=(bob, False))
        second.start()
        deadline = time.monotonic() + PROPAGATION_DEADLINE_SECONDS
        with database.connection_context():
            while not database.execute_sql(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND query LIKE 'LOCK TABLE%%revocation%%'"
            ).fetchone()[0]:
                assert time.monotonic() < deadline, "the second recording did not wait"
                time.sleep(0.05)
            assert Revocation.after(0) == []  # neither is visible yet
    finally:
        release.set()
        first.join()
    second.join()
    with database.connection_context():
        assert [row[1] for row in Revocation.after(0)] == [ann.id, bob.id]


# --- 3: refresh tokens ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        {"password": "a new password"},
        {"email": "elsewhere@example.com"},
        {"role": "partner"},
        None,  # deletion
    ],
    ids=["password", "email", "role", "deletion"],
)
def test_a_change_revokes_every_refresh_token_of_the_user(client, anonymous, change):
    user, other = create_user(client), create_user(client)
    logins = [_login(anonymous, user), _login(anonymous, user)]
    others = _login(anonymous, other)
    if change is None:
        assert client.delete(_user_url(user)).status_code == 204
    else:
        assert client.patch(_user_url(user), json=change).status_code == 200
    for login in logins:
        response = _refresh(anonymous, login["refresh_token"])
        assert response.status_code == 400, response.text
        assert response.json()["error"] == "invalid_grant"
        assert "used already" not in response.json()["error_description"]
    assert _refresh(anonymous, others["refresh_token"]).status_code == 200
    if change is not None:
        # The user logs in again (with the new email or password) and refreshes as before.
        email = change.get("email", user["email"])
        again = _login(anonymous, {"email": email}, change.get("password", PASSWORD))
        refreshed = _refresh(anonymous, again["refresh_token"])
        assert refreshed.status_code == 200, refreshed.text
        assert _works(anonymous, refreshed.json())


def test_a_name_change_keeps_refresh_tokens(client, anonymous):
    user = create_user(client)
    login = _login(anonymous, user)
    assert client.patch(_user_url(user), json={"name": "Renamed"}).status_code == 200
    assert _refresh(anonymous, login["refresh_token"]).status_code == 200


def test_a_refresh_token_from_a_login_that_raced_a_change_is_refused(client, anonymous):
    """A login that checked the old password before a change committed, and stored its refresh
    token after the change revoked the others, still holds the old credentials version."""
    user = create_user(client)
    login = _login(anonymous, user)
    with database.atomic():  # the change, as if it had committed just before the login's insert
        User.update(credentials_version=User.credentials_version + 1).where(
            User.id == user["id"]
        ).execute()
    assert RefreshToken.get(RefreshToken.user == user["id"]).revoked_at is None
    response = _refresh(anonymous, login["refresh_token"])
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_grant"


# --- 7: the current password for one's own password or email ----------------------------------


@pytest.mark.parametrize(
    "change",
    [{"password": "a new password"}, {"email": "mine@example.com"}],
    ids=["password", "email"],
)
@pytest.mark.parametrize("method", ["PATCH", "PUT"])
def test_changing_your_own_credentials_takes_your_current_password(
    client, anonymous, change, method
):
    user = create_user(client)
    login = _login(anonymous, user)
    url = _user_url(user)
    base = (
        {"email": user["email"], "name": user["name"], "password": PASSWORD}
        if method == "PUT"
        else {}
    )
    body = {**base, **change}
    for current, why in (
        (None, "is required"),
        ("not my password", "is not your current password"),
    ):
        sent = body if current is None else {**body, "current_password": current}
        response = anonymous.request(method, url, json=sent, headers=_as(login))
        problem = assert_problem(response, 403)
        assert problem["errors"] == [{"pointer": "/current_password", "detail": why}]
        assert "current_password" in problem["detail"]
        assert "not my password" not in response.text
        assert "a new password" not in response.text
    # Nothing changed, nothing was revoked.
    assert client.get(url).json()["email"] == user["email"]
    assert _works(anonymous, login)
    assert _works(anonymous, _login(anonymous, user))
    sent = {**body, "current_password": PASSWORD}
    response = anonymous.request(method, url, json=sent, headers=_as(login))
    assert response.status_code == 200, response.text
    assert "current_password" not in response.json()
    _assert_revoked(anonymous.get("/v1/products", headers=_as(login)))
    again = _login(
        anonymous, {"email": change.get("email", user["email"])}, change.get("password", PASSWORD)
    )
    assert _works(anonymous, again)


def test_your_api_key_needs_your_current_password_too(client, anonymous):
    partner = create_user(client, role="partner")
    key = client.post(
        "/v1/api-keys", json={"name": "k", "scopes": ["users:write"], "owner_id": partner["id"]}
    ).json()["key"]
    as_key = {"X-API-Key": key}
    change = {"password": "a new password"}
    assert_problem(anonymous.patch(_user_url(partner), json=change, headers=as_key), 403)
    sent = {**change, "current_password": PASSWORD}
    assert anonymous.patch(_user_url(partner), json=sent, headers=as_key).status_code == 200
    _login(anonymous, partner, "a new password")


def test_an_admin_needs_their_own_current_password_not_another_users(client, anonymous):
    admin = create_user(client, role="admin")
    as_admin = bearer_for(admin)
    customer = create_user(client)
    other = {"password": "set by the admin", "email": "moved@example.com"}
    assert anonymous.patch(_user_url(customer), json=other, headers=as_admin).status_code == 200
    _login(anonymous, {"email": "moved@example.com"}, "set by the admin")
    own = {"password": "the admins new one"}
    assert_problem(anonymous.patch(_user_url(admin), json=own, headers=as_admin), 403)


def test_the_current_password_is_not_needed_for_anything_else_and_restating_it_keeps_tokens(
    client, anonymous
):
    user = create_user(client)
    login = _login(anonymous, user)
    url = _user_url(user)
    assert anonymous.patch(url, json={"name": "Ann"}, headers=_as(login)).status_code == 200
    # Ignored where it is not needed, right or wrong.
    renamed = {"name": "Ann B", "current_password": "whatever"}
    assert anonymous.patch(url, json=renamed, headers=_as(login)).status_code == 200
    # A PUT restates the password; proven with current_password, it is no change.
    same = {"email": user["email"], "name": "A", "password": PASSWORD, "current_password": PASSWORD}
    assert anonymous.put(url, json=same, headers=_as(login)).status_code == 200
    assert _works(anonymous, login)
    assert _refresh(anonymous, login["refresh_token"]).status_code == 200


@pytest.mark.parametrize(
    "change",
    [
        lambda user: setattr(user, "password", "another horse"),
        lambda user: setattr(user, "email", "elsewhere@example.com"),
        lambda user: setattr(user, "role", "partner"),
    ],
    ids=["password", "email", "role"],
)
def test_a_change_made_outside_the_api_revokes_too(client, anonymous, change):
    """The rule is the model's: an admin command, a seed or an import that changes a user's
    credentials through models/user.py revokes what the user was issued, as the API does."""
    user = create_user(client)
    login = _login(anonymous, user)
    other = _login(anonymous, create_user(client))
    with database.connection_context():
        stored = User.get_by_id(user["id"])
        change(stored)
        stored.save()
    _assert_revoked(anonymous.get("/v1/products", headers=_as(login)))
    assert _works(anonymous, other)
    assert _refresh(anonymous, login["refresh_token"]).status_code == 400


def test_a_user_deleted_outside_the_api_has_their_tokens_revoked(client, anonymous):
    user = create_user(client)
    login = _login(anonymous, user)
    with database.connection_context():
        User.get_by_id(user["id"]).delete_without_orders()
    _assert_revoked(anonymous.get("/v1/products", headers=_as(login)))


def test_a_change_of_name_outside_the_api_revokes_nothing(client, anonymous):
    user = create_user(client)
    login = _login(anonymous, user)
    with database.connection_context():
        stored = User.get_by_id(user["id"])
        stored.name = "Someone else"
        stored.save()
    assert _works(anonymous, login)


@pytest.mark.parametrize(
    "current, why",
    [(None, "is required"), ("not my password", "is not your current password")],
    ids=["missing", "wrong"],
)
def test_a_change_made_outside_the_api_by_the_user_takes_their_current_password(
    client, anonymous, current, why
):
    """The current-password rule is the model's too: any path through models/user.py that
    changes a user's password on the user's own behalf (a self-service import, a command) asks
    for it, and changes nothing without it; the user's old password still logs in."""
    user = create_user(client)
    changes = {"password": "a new password"}
    if current is not None:
        changes["current_password"] = current
    with database.connection_context():
        change = CredentialsChange(user["id"], changes, by_the_user=True)
        with pytest.raises(CurrentPasswordRequired) as refused, database.atomic():
            change.apply(User.get_for_update(user["id"]), User.assign)
    assert refused.value.why == why
    assert _works(anonymous, _login(anonymous, user))


def test_a_change_made_outside_the_api_on_the_users_behalf_and_restating_the_password(
    client, anonymous
):
    """Made for the user by someone else (an admin's command), a change takes no current
    password; a password restated unchanged is no change and revokes nothing."""
    user = create_user(client)
    login = _login(anonymous, user)
    with database.connection_context(), database.atomic():
        restated = CredentialsChange(user["id"], {"password": PASSWORD}, by_the_user=False)
        stored = User.get_for_update(user["id"])
        assert not restated.apply(stored, User.assign)
    assert _works(anonymous, login)
    with database.connection_context(), database.atomic():
        change = CredentialsChange(user["id"], {"password": "a new password"}, by_the_user=False)
        stored = User.get_for_update(user["id"])
        assert change.apply(stored, User.assign)
        stored.save()
    _assert_revoked(anonymous.get("/v1/products", headers=_as(login)))
    _login(anonymous, user, "a new password")
