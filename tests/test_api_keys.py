"""Partner API keys: issued by an admin and shown once, listed without secrets, revocable."""

import datetime

from support.helpers import assert_problem, bearer_for, create_user

from models import ApiKey


def _in(seconds: int) -> str:
    moment = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds)
    return moment.isoformat().replace("+00:00", "Z")


def test_a_key_is_shown_once_and_acts_as_its_owner(client, anonymous):
    partner = create_user(client, role="partner")
    response = client.post(
        "/v1/api-keys",
        json={
            "name": "Acme sync",
            "scopes": ["products:write", "products:read"],
            "owner_id": partner["id"],
            "expires_at": _in(3600),
        },
    )
    assert response.status_code == 201, response.text
    issued = response.json()
    assert response.headers["location"] == f"/v1/api-keys/{issued['id']}"
    assert issued["key"].startswith(issued["prefix"])
    assert issued["scopes"] == ["products:read", "products:write"]

    shown = client.get(f"/v1/api-keys/{issued['id']}").json()
    assert "key" not in shown
    assert shown == {k: v for k, v in issued.items() if k != "key"}
    listed = client.get("/v1/api-keys")
    assert issued["key"] not in listed.text
    assert [k["id"] for k in listed.json()["data"]] == [issued["id"]]

    new = {"sku": "ACME-1", "name": "Anvil", "price_cents": 5000}
    made = anonymous.post("/v1/products", json=new, headers={"X-API-Key": issued["key"]})
    assert made.status_code == 201, made.text


def test_a_revoked_key_stops_working_and_is_gone_from_the_api(client, anonymous):
    owner = create_user(client, role="partner")
    issued = client.post(
        "/v1/api-keys", json={"name": "k", "scopes": ["products:read"], "owner_id": owner["id"]}
    ).json()
    assert client.delete(f"/v1/api-keys/{issued['id']}").status_code == 204
    assert_problem(anonymous.get("/v1/products", headers={"X-API-Key": issued["key"]}), 401)
    assert_problem(client.get(f"/v1/api-keys/{issued['id']}"), 404)
    assert_problem(client.delete(f"/v1/api-keys/{issued['id']}"), 404)
    assert client.get("/v1/api-keys").json()["data"] == []
    # Kept on record, outside the API.
    assert ApiKey.get_by_id(issued["id"]).revoked_at is not None


def test_a_key_is_refused_beyond_its_owners_role_or_already_expired(client):
    customer = create_user(client)
    cases = [
        ({"scopes": ["products:write"], "owner_id": customer["id"]}, "/scopes"),
        ({"scopes": ["products:read"], "owner_id": 999999}, "/owner_id"),
        (
            {"scopes": ["products:read"], "owner_id": customer["id"], "expires_at": _in(-60)},
            "/expires_at",
        ),
        # The caller here is an OAuth client, which is no user to default the owner to.
        ({"scopes": ["products:read"]}, "/owner_id"),
    ]
    for fields, pointer in cases:
        response = client.post("/v1/api-keys", json={"name": "k", **fields})
        body = assert_problem(response, 422)
        assert body["errors"][0]["pointer"] == pointer
    assert client.get("/v1/api-keys").json()["data"] == []


def test_a_malformed_key_request_is_400(client):
    for body in (
        {"name": "k", "scopes": []},
        {"name": "k", "scopes": ["root"]},
        {"name": "k", "scopes": ["products:read"], "expires_at": "tomorrow"},
        {"name": "k", "scopes": ["products:read"], "key": "shk_mine"},
    ):
        assert_problem(client.post("/v1/api-keys", json=body), 400)


def test_a_key_defaults_to_belonging_to_the_admin_who_asks(client, anonymous):
    admin = create_user(client, role="admin")
    response = anonymous.post(
        "/v1/api-keys", json={"name": "mine", "scopes": ["admin"]}, headers=bearer_for(admin)
    )
    assert response.status_code == 201, response.text
    assert response.json()["owner_id"] == admin["id"]
