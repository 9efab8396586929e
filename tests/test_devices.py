"""Devices through the API: registering (idempotent), listing, removing, who reaches whose,
what is refused, and the Web Push key. Delivery to them is tests/test_push.py."""

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from support.helpers import (
    VAPID,
    assert_problem,
    bearer,
    bearer_for,
    create_user,
    scalar,
    wait_for,
)
from support.live import ALL_AT_ONCE, live_server
from support.push_services import BrowserSubscription, b64url

from models import Device
from models.db import database, is_postgresql
from models.device import token_digest

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
    reader = _as(app, create_user(client))  # the tests' apps have VAPID_PRIVATE_KEY_FILE set
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


def test_a_user_has_at_most_the_device_limit_and_the_least_recently_registered_is_retired(
    app_with,
):
    """Beyond PUSH_DEVICES_PER_USER the device registered longest ago is retired (removed, with
    a fixed reason), not the new one refused: tokens change on reinstall, and a refused user
    would be left with stale devices. Retired devices are kept only as many as the limit."""
    app = app_with(push_devices_per_user=3)
    client = app.test_client()
    client.headers.update(bearer())
    user = create_user(client)
    own = _as(app, user)
    devices = f"/v1/users/{user['id']}/devices"

    def register(token: str):
        answer = own.post(devices, json={"platform": "fcm", "token": token})
        assert answer.status_code in (200, 201), answer.text
        return answer.json()

    def listed() -> dict[str, dict]:
        data = own.get(devices, params={"per_page": 100}).json()["data"]
        return {d["token_hint"].removeprefix("…"): d for d in data}

    for token in ("tk0001", "tk0002", "tk0003"):  # a token's last 6 characters are its hint
        register(token)
    register("tk0001")  # registered again at the app's start: the most recent now
    register("tk0004")
    retired = listed()["tk0002"]
    assert retired["removed_at"] is not None
    assert retired["removed_reason"] == (
        "retired for a newer device: a user's notifications go to at most 3 devices"
    )
    active = sorted(token for token, d in listed().items() if d["removed_at"] is None)
    assert active == ["tk0001", "tk0003", "tk0004"]

    assert register("tk0002")["removed_at"] is None  # back, and tk0003 retired for it
    assert listed()["tk0003"]["removed_at"] is not None

    for n in range(5, 15):
        register(f"tk{n:04d}")
    kept = listed()
    assert sorted(t for t, d in kept.items() if d["removed_at"] is None) == [
        "tk0012",
        "tk0013",
        "tk0014",
    ]
    assert len(kept) == 6  # and the 3 retired most recently: the rows stay bounded


def test_a_web_push_endpoint_must_use_port_443_unless_the_ports_setting_allows_another(
    app_with,
):
    def client_of(**settings):
        client = app_with(webpush_allow_private=False, **settings).test_client()
        client.headers.update(bearer())
        return client, f"/v1/users/{create_user(client)['id']}/devices"

    def subscription(endpoint: str) -> dict:
        browser = BrowserSubscription.new(endpoint)
        return {"platform": "webpush", "subscription": browser.to_json()}

    client, devices = client_of()
    for port in (0, 80, 8443, 65535):
        endpoint = f"https://push.example.net:{port}/wpush/v2/x"
        problem = assert_problem(client.post(devices, json=subscription(endpoint)), 422)
        assert [e.get("pointer") for e in problem["errors"]] == ["/subscription/endpoint"]
        assert "port 443" in problem["errors"][0]["detail"], problem
    explicit = client.post(devices, json=subscription("https://push.example.net:443/wpush/v2/x"))
    assert explicit.status_code == 201, explicit.text

    client, devices = client_of(webpush_ports=(443, 8443))
    other = client.post(devices, json=subscription("https://push.example.net:8443/wpush/v2/y"))
    assert other.status_code == 201, other.text
    assert_problem(client.post(devices, json=subscription("https://push.example.net:8080/z")), 422)


def test_web_push_hosts_limit_endpoints_to_the_push_services_named(app_with):
    client = app_with(
        webpush_allow_private=False, webpush_hosts=("push.services.mozilla.com",)
    ).test_client()
    client.headers.update(bearer())
    devices = f"/v1/users/{create_user(client)['id']}/devices"

    def register(endpoint: str):
        subscription = BrowserSubscription.new(endpoint).to_json()
        return client.post(devices, json={"platform": "webpush", "subscription": subscription})

    for endpoint in (
        "https://updates.push.services.mozilla.com/wpush/v2/gAAAA",
        "https://push.services.mozilla.com/wpush/v2/gAAAB",
    ):
        assert register(endpoint).status_code == 201, endpoint
    for endpoint in (
        "https://push.example.net/wpush/v2/gAAAA",
        "https://evilpush.services.mozilla.com/wpush/v2/gAAAA",
        "https://push.services.mozilla.com.example.net/wpush/v2/gAAAA",
    ):
        problem = assert_problem(register(endpoint), 422)
        assert [e.get("pointer") for e in problem["errors"]] == ["/subscription/endpoint"]


def test_a_token_registered_by_a_concurrent_request_is_the_same_device_not_a_conflict(
    app, client, direct_database_url
):
    """Another registration of this token commits while this one is inserting it: this one
    answers as if it came second (200, that device), never 409. Made deterministic on
    PostgreSQL: the other registration's row is inserted here and committed once this
    request waits on the unique digest. (SQLite takes its write lock at BEGIN: no race.)"""
    if not is_postgresql():
        pytest.skip("SQLite transactions take the write lock when they begin: no such race")
    user = create_user(client)
    devices = f"/v1/users/{user['id']}/devices"
    answers = []
    request = threading.Thread(
        target=lambda: answers.append(
            _as(app, user).post(devices, json={"platform": "fcm", "token": FCM_TOKEN})
        )
    )
    with database.atomic():
        other = Device.create(
            user=user["id"],
            platform="fcm",
            token=FCM_TOKEN,
            token_digest=token_digest("fcm", FCM_TOKEN),
            token_hint="…tail42",
        )
        request.start()
        waiting = (
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO \"device\"%'"
        )
        wait_for(
            lambda: scalar(direct_database_url, waiting),
            "the registration to wait on the other one's token",
        )
    request.join(timeout=60)
    [answer] = answers
    assert answer.status_code == 200, answer.text
    assert answer.json()["id"] == other.id


@pytest.mark.slow
def test_concurrent_registrations_of_one_token_answer_as_registrations_in_turn(app, database_url):
    """Real requests at once to a real server: of one user's, one is 201 and the others 200
    with the same device; of two users', each 201 (moved) or 200, and one device remains."""
    body = {"platform": "fcm", "token": FCM_TOKEN}
    with (
        live_server(database_url, **ALL_AT_ONCE) as base,
        httpx.Client(base_url=base, timeout=60, headers=bearer()) as admin,
    ):
        users = [create_user(admin), create_user(admin)]
        start = threading.Barrier(8)

        def register(user):
            with httpx.Client(base_url=base, timeout=60, headers=bearer_for(user)) as own:
                start.wait()
                return own.post(f"/v1/users/{user['id']}/devices", json=body)

        with ThreadPoolExecutor(max_workers=8) as pool:
            alone = list(pool.map(register, [users[0]] * 8))
            assert sorted(a.status_code for a in alone) == [200] * 7 + [201], [
                a.text for a in alone
            ]
            assert len({a.json()["id"] for a in alone}) == 1
            both = list(pool.map(register, users * 4))
        assert {a.status_code for a in both} <= {200, 201}, [a.text for a in both]
        remaining = [
            device
            for user in users
            for device in admin.get(f"/v1/users/{user['id']}/devices").json()["data"]
        ]
        assert len(remaining) == 1
        assert remaining[0]["id"] in {a.json()["id"] for a in both if a.status_code == 201}


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
