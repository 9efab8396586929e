"""Devices through the API: registering (idempotent), listing, removing, who reaches whose,
what is refused, and the Web Push key. Delivery to them is tests/test_push.py."""

from cryptography.hazmat.primitives import serialization
from support.helpers import VAPID, assert_problem, bearer, bearer_for, create_user
from support.push_services import BrowserSubscription, b64url

FCM_TOKEN = "fGx1-example:APA91bH" + "x" * 140 + "tail42"
APNS_TOKEN = "A0" * 32


def _as(app, user):
    client = app.test_client()
    client.headers.update(bearer_for(user))
    return client


def test_a_user_registers_a_device_once_and_sees_only_a_hint_of_its_token(app, client):
    user = create_user(client)
    own = _as(app, user)
    devices = f"/v1/users/{user['id']}/devices"
    first = own.post(devices, json={"platform": "fcm", "token": FCM_TOKEN})
    assert first.status_code == 201, first.text
    device = first.json()
    assert first.headers["location"] == f"{devices}/{device['id']}"
    assert device["platform"] == "fcm"
    assert device["token_hint"] == "…tail42"
    assert device["removed_at"] is None
    assert FCM_TOKEN not in first.text

    again = own.post(devices, json={"platform": "fcm", "token": FCM_TOKEN})
    assert again.status_code == 200, again.text
    assert again.json()["id"] == device["id"]
    apns = own.post(devices, json={"platform": "apns", "token": APNS_TOKEN}).json()
    assert apns["token_hint"] == "…a0a0a0"  # kept in lower case, as APNs writes it

    listed = own.get(devices, params={"sort": "id"}).json()["data"]
    assert [d["id"] for d in listed] == [device["id"], apns["id"]]
    assert own.get(f"{devices}/{device['id']}").json() == again.json()
    assert own.delete(f"{devices}/{device['id']}").status_code == 204
    assert_problem(own.get(f"{devices}/{device['id']}"), 404)


def test_another_users_devices_are_404_and_an_admin_reaches_them(app, client):
    user, other = create_user(client), create_user(client)
    devices = f"/v1/users/{user['id']}/devices"
    created = client.post(devices, json={"platform": "fcm", "token": FCM_TOKEN})
    assert created.status_code == 201  # an admin registers for anyone
    intruder = _as(app, other)
    assert_problem(intruder.get(devices), 404)
    assert_problem(intruder.post(devices, json={"platform": "fcm", "token": "t-1"}), 404)
    assert_problem(intruder.get(f"{devices}/{created.json()['id']}"), 404)
    assert_problem(intruder.delete(f"{devices}/{created.json()['id']}"), 404)
    # What was sent to a device is an admin's to read.
    deliveries = f"{devices}/{created.json()['id']}/deliveries"
    assert_problem(_as(app, user).get(deliveries), 403)
    assert client.get(deliveries).json()["data"] == []


def test_a_token_registered_by_another_user_moves_to_them(app, client):
    before, after = create_user(client), create_user(client)
    body = {"platform": "fcm", "token": FCM_TOKEN}
    old = _as(app, before).post(f"/v1/users/{before['id']}/devices", json=body).json()
    moved = _as(app, after).post(f"/v1/users/{after['id']}/devices", json=body)
    assert moved.status_code == 201
    assert _as(app, before).get(f"/v1/users/{before['id']}/devices").json()["data"] == []
    assert moved.json()["id"] != old["id"]


def test_a_web_push_subscription_is_checked(app_with):
    client = app_with(webpush_allow_private=False).test_client()
    client.headers.update(bearer())
    user = create_user(client)
    devices = f"/v1/users/{user['id']}/devices"
    browser = BrowserSubscription.new("https://push.example.net/wpush/v2/gAAAAABl-abc")
    good = {"platform": "webpush", "subscription": browser.to_json()}
    created = client.post(devices, json=good)
    assert created.status_code == 201, created.text
    assert created.json()["token_hint"] == "https://push.example.net"

    def refused(change: dict, pointer: str):
        body = {**good, "subscription": {**good["subscription"], **change}}
        problem = assert_problem(client.post(devices, json=body), 422)
        assert [e.get("pointer") for e in problem["errors"]] == [pointer], problem

    refused({"endpoint": "https://127.0.0.1/push"}, "/subscription/endpoint")
    refused({"endpoint": "https://localhost/push"}, "/subscription/endpoint")
    refused({"endpoint": "http://push.example.net/push"}, "/subscription/endpoint")
    not_on_curve = b64url(b"\x04" + b"\x01" * 64)
    keys = {"p256dh": not_on_curve, "auth": b64url(b"a" * 16)}
    refused({"keys": keys}, "/subscription/keys/p256dh")
    # Each platform's shape is the contract's (400).
    for wrong in (
        {"platform": "webpush", "token": "x"},
        {"platform": "apns", "token": "xyz"},
        {"platform": "fcm", "token": "x", "subscription": browser.to_json()},
    ):
        assert_problem(client.post(devices, json=wrong), 400)


def test_the_vapid_public_key_is_published_when_web_push_is_set_up(app, client, app_with):
    reader = _as(app, create_user(client))  # the tests' apps have VAPID_PRIVATE_KEY set
    answer = reader.get("/v2/push/vapid-public-key")
    assert answer.status_code == 200, answer.text
    key = serialization.load_pem_private_key(VAPID["vapid_private_key"].encode(), None)
    point = key.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    assert answer.json() == {"public_key": b64url(point)}
    unconfigured = app_with(vapid_private_key=None, vapid_subject=None).test_client()
    unconfigured.headers.update(bearer())
    assert_problem(unconfigured.get("/v1/push/vapid-public-key"), 404)


def test_a_token_or_key_with_a_trailing_newline_is_400(client):
    """The contract's patterns are ECMA-262's, where `$` is the very end: under Python's `re` it
    also matched before a final newline, and such a token jammed the push worker."""
    user = create_user(client)
    devices = f"/v1/users/{user['id']}/devices"
    browser = BrowserSubscription.new("https://push.example.net/wpush/v2/gAAAAABl-abc").to_json()
    keys = browser["keys"]
    for body in (
        {"platform": "apns", "token": APNS_TOKEN + "\n"},
        {"platform": "fcm", "token": FCM_TOKEN + "\n"},
        {
            "platform": "webpush",
            "subscription": {**browser, "keys": {**keys, "auth": keys["auth"] + "\n"}},
        },
        {
            "platform": "webpush",
            "subscription": {**browser, "keys": {**keys, "p256dh": keys["p256dh"] + "\n"}},
        },
    ):
        assert_problem(client.post(devices, json=body), 400)
    assert client.get(devices).json()["data"] == []
    assert client.post(devices, json={"platform": "apns", "token": APNS_TOKEN}).status_code == 201
