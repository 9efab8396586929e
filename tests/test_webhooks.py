"""Registering webhooks: who may, which URLs, the secret shown once, and redelivery. Delivery
itself, by the worker, is tests/test_webhook_delivery.py."""

import pytest
from support.helpers import assert_problem, bearer, bearer_for, create_product, create_user

HOOK = {"url": "https://hooks.example.com/shopapi", "events": ["order.created"]}


def test_a_webhook_is_registered_with_a_secret_shown_once(client):
    response = client.post("/v1/webhooks", json={**HOOK, "description": "Warehouse"})
    assert response.status_code == 201, response.text
    webhook = response.json()
    assert response.headers["location"] == f"/v1/webhooks/{webhook['id']}"
    assert webhook["secret"].startswith("whsec_")
    assert webhook["enabled"] is True
    assert webhook["disabled_reason"] is None
    assert webhook["api_version"] == 1
    shown = client.get(f"/v1/webhooks/{webhook['id']}").json()
    assert shown == {k: v for k, v in webhook.items() if k != "secret"}
    assert "secret" not in client.get("/v1/webhooks").json()["data"][0]


def test_a_webhook_changes_by_merge_patch_and_is_deleted(client):
    webhook = client.post("/v1/webhooks", json=HOOK).json()
    changed = client.patch(
        f"/v1/webhooks/{webhook['id']}",
        json={"events": ["product.low_stock", "order.cancelled"], "enabled": False},
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["events"] == ["product.low_stock", "order.cancelled"]
    assert changed.json()["enabled"] is False
    assert changed.json()["url"] == HOOK["url"]
    assert client.delete(f"/v1/webhooks/{webhook['id']}").status_code == 204
    assert_problem(client.get(f"/v1/webhooks/{webhook['id']}"), 404)


@pytest.mark.parametrize(
    "url",
    [
        "ftp://hooks.example.com/x",
        "http://127.0.0.1:8080/hook",
        "http://[::1]/hook",
        "http://10.0.0.7/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://localhost/hook",
        "http://user:pass@hooks.example.com/hook",
        "not a url",
    ],
)
def test_a_url_that_may_not_receive_webhooks_is_400(client, url):
    body = assert_problem(client.post("/v1/webhooks", json={**HOOK, "url": url}), 400)
    assert any(e.get("pointer") == "/url" or "url" in str(e) for e in body["errors"])
    webhook = client.post("/v1/webhooks", json=HOOK).json()
    assert_problem(client.patch(f"/v1/webhooks/{webhook['id']}", json={"url": url}), 400)


# Addresses written so that a check of the usual form misses them. Each is refused with
# WEBHOOK_ALLOW_PRIVATE off (the `client` fixture's app), the public ones too: the address
# itself, as a.b.c.d, is the one to register.
ADDRESS_FORMS = [
    # IPv4 inside IPv6: mapped, translated, compatible, NAT64 (both prefixes), 6to4, Teredo
    "http://[::ffff:127.0.0.1]/hook",
    "http://[::ffff:7f00:1]/hook",
    "http://[::ffff:8.8.8.8]/hook",
    "http://[::ffff:0:a9fe:a9fe]/hook",
    "http://[::127.0.0.1]/hook",
    "http://[::a9fe:a9fe]/hook",
    "http://[64:ff9b::127.0.0.1]/hook",
    "http://[64:ff9b::a9fe:a9fe]/latest/meta-data",
    "http://[64:ff9b::8.8.8.8]/hook",
    "http://[64:ff9b:1::a00:1]/hook",
    "http://[2002:7f00:1::1]/hook",
    "http://[2002:a9fe:a9fe::]/hook",
    "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/hook",
    # IPv6 outside global unicast
    "http://[fec0::1]/hook",
    "http://[fd00::1]/hook",
    "http://[::]/hook",
    # IPv4 other than as four decimal numbers
    "http://127.1/hook",
    "http://127.0.1/hook",
    "http://0x7f000001/hook",
    "http://0x7f.0.0.1/hook",
    "http://2130706433/hook",
    "http://0177.0.0.1/hook",
    "http://010.0.0.1/hook",
    "http://0/hook",
    "http://0x08080808/hook",
    "http://127.0.0.1.1/hook",
]
# Not addresses, or public ones written plainly: still fine.
NOT_ADDRESS_FORMS = [
    "https://8.8.8.8/hook",
    "https://[2606:4700:4700::1111]/hook",
    "https://10.example.com/hook",
    "https://0x7f.example.com/hook",
    "https://hooks.example.com./hook",
]


def test_an_address_in_any_other_form_is_refused_at_registration(client):
    webhook = client.post("/v1/webhooks", json=HOOK).json()
    wrong = {}
    for url in ADDRESS_FORMS:
        answers = (
            client.post("/v1/webhooks", json={**HOOK, "url": url}),
            client.patch(f"/v1/webhooks/{webhook['id']}", json={"url": url}),
        )
        for answer in answers:
            problem = answer.json() if answer.status_code == 400 else {}
            pointers = [error.get("pointer") for error in problem.get("errors", [])]
            if answer.headers["content-type"] != "application/problem+json" or pointers != ["/url"]:
                wrong[url] = (answer.status_code, answer.text)
    for url in NOT_ADDRESS_FORMS:
        answer = client.post("/v1/webhooks", json={**HOOK, "url": url})
        if answer.status_code != 201:
            wrong[url] = (answer.status_code, answer.text)
    assert wrong == {}
    assert client.get(f"/v1/webhooks/{webhook['id']}").json()["url"] == HOOK["url"]


def test_private_targets_are_allowed_when_configured(app_with):
    client = app_with(webhook_allow_private=True).test_client()
    client.headers.update(bearer())
    response = client.post("/v1/webhooks", json={**HOOK, "url": "http://127.0.0.1:9/hook"})
    assert response.status_code == 201, response.text


def test_bad_event_types_are_400(client):
    for events in ([], ["order.shipped"], ["order.created", "order.created"]):
        assert_problem(client.post("/v1/webhooks", json={**HOOK, "events": events}), 400)


def test_partners_manage_their_own_webhooks_and_customers_none(client, anonymous):
    partner, other = create_user(client, role="partner"), create_user(client, role="partner")
    customer = create_user(client)
    assert_problem(anonymous.post("/v1/webhooks", json=HOOK, headers=bearer_for(customer)), 403)
    mine = anonymous.post("/v1/webhooks", json=HOOK, headers=bearer_for(partner)).json()
    assert mine["owner_id"] == partner["id"]
    admins = client.post("/v1/webhooks", json=HOOK).json()
    as_other = bearer_for(other)
    assert_problem(anonymous.get(f"/v1/webhooks/{mine['id']}", headers=as_other), 404)
    assert_problem(anonymous.delete(f"/v1/webhooks/{mine['id']}", headers=as_other), 404)
    listed = anonymous.get("/v1/webhooks", headers=bearer_for(partner)).json()["data"]
    assert [w["id"] for w in listed] == [mine["id"]]
    assert {w["id"] for w in client.get("/v1/webhooks").json()["data"]} == {
        mine["id"],
        admins["id"],
    }
    # Credentials acting for no user and without `admin` own nothing: whose events would it get?
    no_user = bearer("client:x", ["webhooks"])
    assert_problem(anonymous.post("/v1/webhooks", json=HOOK, headers=no_user), 403)
    # ... nor reach the admin's webhooks, which have no owner either.
    assert anonymous.get("/v1/webhooks", headers=no_user).json()["data"] == []
    assert_problem(anonymous.get(f"/v1/webhooks/{admins['id']}", headers=no_user), 404)


def _event_id(client, event_type, **params):
    (event,) = client.get("/v1/events", params={"type": event_type, **params}).json()["data"]
    return event["id"]


def test_an_event_is_redelivered_as_a_new_pending_delivery(client):
    webhook = client.post("/v1/webhooks", json={**HOOK, "events": ["product.created"]}).json()
    create_product(client)
    event_id = _event_id(client, "product.created")
    deliveries = f"/v1/webhooks/{webhook['id']}/deliveries"
    response = client.post(deliveries, json={"event_id": event_id})
    assert response.status_code == 201, response.text
    delivery = response.json()
    assert (delivery["event_id"], delivery["status"], delivery["attempts"]) == (
        event_id,
        "pending",
        [],
    )
    assert response.headers["location"] == f"{deliveries}/{delivery['id']}"
    assert client.get(f"{deliveries}/{delivery['id']}").json() == delivery
    assert client.get(deliveries, params={"status": "pending"}).json()["data"] == [delivery]
    assert client.get(deliveries, params={"status": "delivered"}).json()["data"] == []


def test_only_an_event_the_webhook_takes_is_redelivered(client, anonymous):
    partner, customer = create_user(client, role="partner"), create_user(client)
    as_partner = bearer_for(partner)
    hook = {**HOOK, "events": ["user.created", "product.created"]}
    webhook = anonymous.post("/v1/webhooks", json=hook, headers=as_partner).json()
    deliveries = f"/v1/webhooks/{webhook['id']}/deliveries"
    create_product(client)

    def redeliver(event_id):
        return anonymous.post(deliveries, json={"event_id": event_id}, headers=as_partner)

    assert redeliver(_event_id(client, "product.created")).status_code == 201
    assert (
        redeliver(_event_id(client, "user.created", resource_id=partner["id"])).status_code == 201
    )
    # Another user's record is not the partner's to see.
    assert_problem(redeliver(_event_id(client, "user.created", resource_id=customer["id"])), 422)
    assert_problem(redeliver(10**9), 422)
    client.patch(f"/v1/webhooks/{webhook['id']}", json={"events": ["user.created"]})
    assert_problem(redeliver(_event_id(client, "product.created")), 422)
    assert_problem(client.get("/v1/webhooks/999/deliveries"), 404)


def test_webhooks_filter_by_url_which_must_be_a_uri(client):
    webhook = client.post("/v1/webhooks", json=HOOK).json()
    listed = client.get("/v1/webhooks", params={"url": HOOK["url"]}).json()["data"]
    assert [w["id"] for w in listed] == [webhook["id"]]
    for value in ("", "not a uri", "https://\x0fh"):
        body = assert_problem(client.get("/v1/webhooks", params={"url[ne]": value}), 400)
        assert body["errors"][0]["parameter"] == "url[ne]"
