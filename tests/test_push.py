"""Push delivery as the worker makes it (its fan-out and one delivery thread's job, called
here), to real local push services that check what the real ones check: Web Push (VAPID, an
aes128gcm body a browser's keys decrypt), FCM HTTP v1 (an OAuth token from the service
account's JWT grant) and APNs (HTTP/2 over TLS, an ES256 provider token)."""

import datetime
import email.utils
import logging
import threading
import time
import urllib.parse

import orjson
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jose import jwt
from support.helpers import (
    WAIT_SECONDS,
    bearer,
    bearer_for,
    create_product,
    create_user,
    place_order,
    wait_for,
)
from support.push_services import (
    BrowserSubscription,
    Http2Service,
    Service,
    unb64url,
    verify_es256,
)
from support.tls import self_signed_certificate

from models import Device, Event, PushAttempt, PushDelivery
from models.delivery import Retries
from shopapi.events import push, worker
from shopapi.events.push import sending
from shopapi.events.worker import fan_out, push_one
from shopapi.settings import Settings

PROJECT = "demo-project"
TEAM, KEY_ID, TOPIC = "TEAM123456", "KEY1234567", "com.example.shop"


def _pem(key) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    directory = tmp_path_factory.mktemp("push-keys")
    cert_file, key_file = self_signed_certificate(str(directory))
    return {
        "vapid": ec.generate_private_key(ec.SECP256R1()),
        "service_account": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "apns": ec.generate_private_key(ec.SECP256R1()),
        "tls": (cert_file, key_file),
    }


def _settings(keys, **changes) -> Settings:
    values = {
        "push_transport": "send",
        "vapid_private_key": _pem(keys["vapid"]),
        "vapid_subject": "mailto:ops@example.com",
        "webpush_allow_private": True,
        "delivery_timeout_seconds": 10.0,
        **changes,
    }
    return Settings(**values)


def _apns_settings(keys, base_url: str, **changes) -> Settings:
    """APNs at `base_url` (a local HTTP/2 service with the module's certificate)."""
    return _settings(
        keys,
        apns_key=_pem(keys["apns"]),
        apns_key_id=KEY_ID,
        apns_team_id=TEAM,
        apns_topic=TOPIC,
        apns_base_url=base_url,
        apns_ca_file=keys["tls"][0],
        **changes,
    )


def _run_worker(settings: Settings) -> int:
    """What the worker's threads do until nothing is due: fan out, then push. Returns how many
    attempts were made."""
    senders = sending.senders(settings)
    retries = Retries(settings.delivery_max_attempts, settings.delivery_retry_base_seconds)
    while fan_out(devices_per_user=settings.push_devices_per_user):
        pass
    attempts = 0
    while push_one(senders, retries, settings.delivery_timeout_seconds):
        attempts += 1
    return attempts


def _webpush_app(app_with, settings: Settings):
    """An app that takes Web Push subscriptions at the local push services, with `settings`'
    VAPID key."""
    return app_with(
        vapid_private_key=settings.vapid_private_key,
        vapid_subject=settings.vapid_subject,
        webpush_allow_private=True,
    )


def _client(app, user=None):
    client = app.test_client()
    client.headers.update(bearer_for(user) if user else bearer())
    return client


def _register(client, user, **body) -> dict:
    answer = client.post(f"/v1/users/{user['id']}/devices", json=body)
    assert answer.status_code == 201, answer.text
    return answer.json()


def _deliveries(admin, user, device) -> list[dict]:
    path = f"/v1/users/{user['id']}/devices/{device['id']}/deliveries"
    answer = admin.get(path, params={"sort": "id"})
    assert answer.status_code == 200, answer.text
    return answer.json()["data"]


def _order_for(admin, customer) -> dict:
    order = place_order(admin, customer, (create_product(admin, stock=5), 1))
    assert order.status_code == 201, order.text
    return order.json()


def test_web_push_reaches_the_browser_encrypted_and_signed(app_with, keys):
    settings = _settings(keys)
    app = _webpush_app(app_with, settings)
    admin = _client(app)
    customer = create_user(admin)
    own = _client(app, customer)
    published = own.get("/v1/push/vapid-public-key").json()["public_key"]

    def push_service(request):
        return 410 if request.path.startswith("/gone") else (201, {"Location": "/m/1"}, b"")

    with Service(push_service) as service:
        browser = BrowserSubscription.new(f"{service.url}/wpush/v2/subscription-1")
        stale = BrowserSubscription.new(f"{service.url}/gone/subscription-2")
        device = _register(own, customer, platform="webpush", subscription=browser.to_json())
        gone = _register(own, customer, platform="webpush", subscription=stale.to_json())
        order = _order_for(admin, customer)
        # The welcome and the order to each; the stale subscription's first 410 removed it.
        assert _run_worker(settings) == 3
        _order_for(admin, customer)
        assert _run_worker(settings) == 1  # to the live subscription only

    received = [r for r in service.requests if r.path.startswith("/wpush/")]
    assert len(received) == 3
    assert len(service.requests) == 4
    vapid_public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), unb64url(published))
    messages = []
    for request in received:
        assert request.headers["content-encoding"] == "aes128gcm"
        assert int(request.headers["ttl"]) > 0
        scheme, _, params = request.headers["authorization"].partition(" ")
        assert scheme == "vapid"
        fields = dict(part.strip().split("=", 1) for part in params.split(","))
        assert fields["k"] == published
        header, claims = verify_es256(fields["t"], vapid_public)
        assert header["alg"] == "ES256"
        origin = urllib.parse.urlsplit(service.url)
        assert claims["aud"] == f"{origin.scheme}://{origin.netloc}"
        assert time.time() < claims["exp"] <= time.time() + 24 * 3600
        assert claims["sub"] == "mailto:ops@example.com"
        messages.append(orjson.loads(browser.decrypt(request.body)))
    welcome, placed, _ = sorted(messages, key=lambda m: int(m["data"]["event_id"]))
    assert welcome["title"] == "Welcome"
    assert placed == {
        "title": "Order placed",
        "body": f"Your order {order['id']} has been placed",
        "tag": f"order-{order['id']}",
        "data": {
            "event_id": placed["data"]["event_id"],
            "type": "order.created",
            "resource_type": "order",
            "resource_id": str(order["id"]),
        },
    }

    delivered = _deliveries(admin, customer, device)
    assert [(d["status"], [a["response_status"] for a in d["attempts"]]) for d in delivered] == [
        ("delivered", [201]),
        ("delivered", [201]),
        ("delivered", [201]),
    ]
    # 410: the subscription is gone; the device is removed, nothing more is sent to it.
    removed = own.get(f"/v1/users/{customer['id']}/devices/{gone['id']}").json()
    assert removed["removed_at"] is not None
    assert (
        removed["removed_reason"] == "the push service answered 410: the token is no longer valid"
    )
    tried, untried = _deliveries(admin, customer, gone)
    assert [a["response_status"] for a in tried["attempts"]] == [410]
    assert (tried["status"], untried["status"], untried["attempts"]) == ("failed", "failed", [])


def test_fcm_gets_each_token_its_message_with_an_oauth_token_from_the_service_account(
    app, client, keys
):
    account = keys["service_account"]
    public_pem = account.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    issued = []

    def token_endpoint(request):
        form = dict(urllib.parse.parse_qsl(request.body.decode()))
        assert form["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"
        claims = jwt.decode(
            form["assertion"], public_pem.decode(), algorithms=["RS256"], audience=token_uri
        )
        assert claims["iss"] == "push@demo-project.iam.gserviceaccount.com"
        assert claims["scope"] == "https://www.googleapis.com/auth/firebase.messaging"
        assert jwt.get_unverified_header(form["assertion"])["kid"] == "key-1"
        issued.append(f"ya29.token-{len(issued) + 1}")
        body = {"access_token": issued[-1], "expires_in": 3599, "token_type": "Bearer"}
        return 200, {"Content-Type": "application/json"}, orjson.dumps(body)

    def fcm(request):
        if request.headers.get("authorization") != f"Bearer {issued[-1]}":
            return 401, {}, b'{"error": {"code": 401, "status": "UNAUTHENTICATED"}}'
        assert request.path == f"/v1/projects/{PROJECT}/messages:send"
        token = orjson.loads(request.body)["message"]["token"]
        if token == "gone-token":
            error = {
                "code": 404,
                "status": "NOT_FOUND",
                "message": "Requested entity was not found.",
                "details": [
                    {
                        "@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError",
                        "errorCode": "UNREGISTERED",
                    }
                ],
            }
            return 404, {"Content-Type": "application/json"}, orjson.dumps({"error": error})
        if token == "busy-token":
            error = {
                "code": 429,
                "status": "RESOURCE_EXHAUSTED",
                "details": [{"errorCode": "QUOTA_EXCEEDED"}],
            }
            return 429, {"Retry-After": "120"}, orjson.dumps({"error": error})
        return 200, {"Content-Type": "application/json"}, b'{"name": "projects/p/messages/1"}'

    with Service(token_endpoint) as oauth, Service(fcm) as service:
        token_uri = f"{oauth.url}/token"
        settings = _settings(
            keys,
            fcm_base_url=service.url,
            fcm_service_account={
                "project_id": PROJECT,
                "private_key": _pem(account),
                "private_key_id": "key-1",
                "client_email": "push@demo-project.iam.gserviceaccount.com",
                "token_uri": token_uri,
            },
        )
        customer = create_user(client)
        own = _client(app, customer)
        devices = {
            name: _register(own, customer, platform="fcm", token=name)
            for name in ("live-token", "gone-token", "busy-token")
        }
        order = _order_for(client, customer)
        # Each device: the welcome and the order. The gone one's first answer removes it.
        started = datetime.datetime.now(datetime.UTC)
        assert _run_worker(settings) == 5

    assert len(oauth.requests) == 1  # one access token, kept for every send
    sent = [orjson.loads(r.body)["message"] for r in service.requests]
    to_live = [m for m in sent if m["token"] == "live-token"]
    assert to_live[1] == {
        "token": "live-token",
        "notification": {
            "title": "Order placed",
            "body": f"Your order {order['id']} has been placed",
        },
        "data": {
            "event_id": to_live[1]["data"]["event_id"],
            "type": "order.created",
            "resource_type": "order",
            "resource_id": str(order["id"]),
        },
        "android": {"collapse_key": f"order-{order['id']}"},
    }
    assert all("topic" not in message for message in sent)

    live = _deliveries(client, customer, devices["live-token"])
    assert [d["status"] for d in live] == ["delivered", "delivered"]
    gone = own.get(f"/v1/users/{customer['id']}/devices/{devices['gone-token']['id']}").json()
    assert gone["removed_reason"] == "the push service answered 404: the token is no longer valid"
    [removal, _] = _deliveries(client, customer, devices["gone-token"])
    assert "UNREGISTERED" in removal["attempts"][0]["error"]  # FCM's words, for an admin
    busy = _deliveries(client, customer, devices["busy-token"])
    assert [d["status"] for d in busy] == ["pending", "pending"]
    for delivery in busy:
        [attempt] = delivery["attempts"]
        assert attempt["response_status"] == 429
        due = datetime.datetime.fromisoformat(delivery["next_attempt_at"])
        # Not before the Retry-After, whatever the backoff (30 s at first) would have said.
        assert due >= started + datetime.timedelta(seconds=120)


def test_fcm_access_token_refused_early_is_renewed_and_the_message_sent_again(app, client, keys):
    """A 401 from FCM (the access token revoked before it expired) is no fault of the device:
    the token is forgotten, and the retry carries a new one."""
    issued, refused = [], set()

    def token_endpoint(request):
        issued.append(f"ya29.token-{len(issued) + 1}")
        body = {"access_token": issued[-1], "expires_in": 3599, "token_type": "Bearer"}
        return 200, {"Content-Type": "application/json"}, orjson.dumps(body)

    def fcm(request):
        token = request.headers.get("authorization", "").removeprefix("Bearer ")
        if token == issued[0]:
            refused.add(token)
            return 401, {}, b'{"error": {"code": 401, "status": "UNAUTHENTICATED"}}'
        return 200, {"Content-Type": "application/json"}, b'{"name": "projects/p/messages/1"}'

    with Service(token_endpoint) as oauth, Service(fcm) as service:
        settings = _settings(
            keys,
            fcm_base_url=service.url,
            fcm_service_account={
                "project_id": PROJECT,
                "private_key": _pem(keys["service_account"]),
                "private_key_id": "key-1",
                "client_email": "push@demo-project.iam.gserviceaccount.com",
                "token_uri": f"{oauth.url}/token",
            },
            delivery_retry_base_seconds=0.0,  # a retry is due at once
        )
        customer = create_user(client)
        own = _client(app, customer)
        device = _register(own, customer, platform="fcm", token="one-install")
        # The welcome: refused with the first access token, sent with the second.
        assert _run_worker(settings) == 2

    assert issued == ["ya29.token-1", "ya29.token-2"] and refused == {"ya29.token-1"}
    [welcome] = _deliveries(client, customer, device)
    assert welcome["status"] == "delivered"
    assert [a["response_status"] for a in welcome["attempts"]] == [401, 200]
    kept = own.get(f"/v1/users/{customer['id']}/devices/{device['id']}").json()
    assert kept["removed_at"] is None


def test_apns_gets_each_device_token_over_http2_with_a_provider_token(app, client, keys):
    cert_file, key_file = keys["tls"]
    apns_public = keys["apns"].public_key()

    def apns(request):
        scheme, _, token = request.headers["authorization"].partition(" ")
        assert scheme == "bearer"
        header, claims = verify_es256(token, apns_public)
        assert (header["alg"], header["kid"]) == ("ES256", KEY_ID)
        assert claims["iss"] == TEAM
        assert abs(claims["iat"] - time.time()) < 3600
        assert request.headers["apns-topic"] == TOPIC
        assert request.headers["apns-push-type"] == "alert"
        assert request.headers["apns-collapse-id"].startswith(("order-", "user-"))
        device_token = request.path.removeprefix("/3/device/")
        if device_token == "b" * 64:
            return 410, {"apns-id": "1"}, b'{"reason": "Unregistered", "timestamp": 1700000000000}'
        if device_token == "c" * 64:
            return 400, {}, b'{"reason": "BadDeviceToken"}'
        return 200, {"apns-id": "2"}, b""

    with Http2Service(apns, cert_file, key_file) as service:
        settings = _apns_settings(keys, service.url)
        customer = create_user(client)
        own = _client(app, customer)
        devices = {
            letter: _register(own, customer, platform="apns", token=letter * 64) for letter in "abc"
        }
        order = _order_for(client, customer)
        assert _run_worker(settings) == 4  # two to the good one; one each to the others

    assert set(service.protocols) == {"h2"}
    assert len({r.headers["authorization"] for r in service.requests}) == 1  # reused
    to_good = [orjson.loads(r.body) for r in service.requests if r.path.endswith("a" * 64)]
    assert to_good[1] == {
        "aps": {
            "alert": {"title": "Order placed", "body": f"Your order {order['id']} has been placed"},
            "thread-id": f"order-{order['id']}",
        },
        "event_id": to_good[1]["event_id"],
    }
    assert [d["status"] for d in _deliveries(client, customer, devices["a"])] == [
        "delivered",
        "delivered",
    ]
    listed = {d["id"]: d for d in own.get(f"/v1/users/{customer['id']}/devices").json()["data"]}
    assert listed[devices["b"]["id"]]["removed_reason"] == (
        "the push service answered 410: the token is no longer valid"
    )
    assert listed[devices["c"]["id"]]["removed_reason"] == (
        "the push service answered 400: the token is no longer valid"
    )
    [refusal, _] = _deliveries(client, customer, devices["c"])
    assert "BadDeviceToken" in refusal["attempts"][0]["error"]  # APNs's words, for an admin
    assert listed[devices["a"]["id"]]["removed_at"] is None


def test_apns_expired_provider_token_is_replaced_and_retry_after_as_a_date_is_kept(
    app, client, keys
):
    """APNs's 403 ExpiredProviderToken: the next attempt signs a new provider token. A 429 whose
    Retry-After is an HTTP date (RFC 9110 10.2.3) is not tried again before that date."""
    cert_file, key_file = keys["tls"]
    busy_until = email.utils.format_datetime(
        datetime.datetime.now(datetime.UTC).replace(microsecond=0) + datetime.timedelta(minutes=10),
        usegmt=True,
    )
    seen_tokens = []

    def apns(request):
        token = request.headers["authorization"].removeprefix("bearer ")
        device_token = request.path.removeprefix("/3/device/")
        if device_token == "e" * 64:
            return 429, {"retry-after": busy_until}, b'{"reason": "TooManyRequests"}'
        seen_tokens.append(token)
        if len(seen_tokens) == 1:
            return 403, {}, b'{"reason": "ExpiredProviderToken"}'
        return 200, {"apns-id": "3"}, b""

    with Http2Service(apns, cert_file, key_file) as service:
        # A retry is due at once, unless Retry-After says otherwise.
        settings = _apns_settings(keys, service.url, delivery_retry_base_seconds=0.0)
        customer = create_user(client)
        own = _client(app, customer)
        fresh = _register(own, customer, platform="apns", token="d" * 64)
        busy = _register(own, customer, platform="apns", token="e" * 64)
        assert _run_worker(settings) == 3  # fresh: refused, then sent; busy: once

    assert len(seen_tokens) == 2 and seen_tokens[0] != seen_tokens[1]  # a new token signed
    [welcome] = _deliveries(client, customer, fresh)
    assert welcome["status"] == "delivered"
    assert [a["response_status"] for a in welcome["attempts"]] == [403, 200]
    [waiting] = _deliveries(client, customer, busy)
    assert waiting["status"] == "pending"
    due = datetime.datetime.fromisoformat(waiting["next_attempt_at"])
    assert due >= email.utils.parsedate_to_datetime(busy_until)


def test_a_sender_that_raises_records_its_attempts_until_the_delivery_fails(
    app, client, keys, caplog
):
    """Devices the API refuses, written here through the model: an APNs token ending in a
    newline (httpx refuses the URL) and a Web Push `auth` with one character too many (base64
    refuses it). Each attempt is kept as the sender's failure and counts, until the delivery
    fails; the other user's notification goes out all the same, and each failure is logged
    with its traceback, never echoed to the API."""
    cert_file, key_file = keys["tls"]
    with (
        Http2Service(lambda request: 200, cert_file, key_file) as apns,
        Service(lambda request: 201) as push_service,
    ):
        settings = _apns_settings(
            keys, apns.url, delivery_max_attempts=3, delivery_retry_base_seconds=0.0
        )
        jammer = create_user(client)
        subscription = BrowserSubscription.new(f"{push_service.url}/wpush/1").to_json()
        too_long = {**subscription["keys"], "auth": subscription["keys"]["auth"] + "\n"}
        jams = {
            "httpx.InvalidURL": Device.register(
                jammer["id"], "apns", "a" * 64 + "\n", "…a", {}, limit=20
            ),
            "binascii.Error": Device.register(
                jammer["id"], "webpush", subscription["endpoint"], "…1", too_long, limit=20
            ),
        }
        other = create_user(client)
        fine = _register(_client(app, other), other, platform="apns", token="f" * 64)
        with caplog.at_level(logging.ERROR, logger="shopapi.worker"):
            assert _run_worker(settings) == 3 + 3 + 1

    for error, (device, _) in jams.items():
        [welcome] = _deliveries(client, jammer, {"id": device.id})
        assert welcome["status"] == "failed"
        assert [(a["number"], a["response_status"], a["error"]) for a in welcome["attempts"]] == [
            (n, None, f"the sender failed: {error}") for n in (1, 2, 3)
        ]
    assert [d["status"] for d in _deliveries(client, other, fine)] == ["delivered"]
    assert [r.path for r in apns.requests] == ["/3/device/" + "f" * 64]
    assert push_service.requests == []
    failures = [r for r in caplog.records if r.message == "push sender failed"]
    assert len(failures) == 6 and all(r.exc_info for r in failures)


@pytest.mark.parametrize(
    ("status", "retry_after"),
    [
        (503, "\N{SUPERSCRIPT TWO}"),  # a digit to str.isdigit(), not to float() nor RFC 9110
        (503, "soon"),
    ],
)
def test_a_retry_after_that_is_no_number_of_seconds_leaves_the_backoff(
    app_with, keys, status, retry_after
):
    """RFC 9110 10.2.3: delay-seconds is ASCII digits. Anything else that is no HTTP-date is
    ignored: the answer is a retry after the usual backoff."""
    settings = _settings(keys, delivery_retry_base_seconds=1.0)
    app = app_with(vapid_private_key=settings.vapid_private_key, webpush_allow_private=True)
    admin = _client(app)
    customer = create_user(admin)
    with Service(lambda request: (status, {"Retry-After": retry_after}, b"")) as service:
        browser = BrowserSubscription.new(f"{service.url}/wpush/1")
        device = _register(
            _client(app, customer), customer, platform="webpush", subscription=browser.to_json()
        )
        assert _run_worker(settings) == 1

    [welcome] = _deliveries(admin, customer, device)
    assert welcome["status"] == "pending"
    assert [(a["response_status"], a["error"]) for a in welcome["attempts"]] == [
        (status, str(status))
    ]
    due = datetime.datetime.fromisoformat(welcome["next_attempt_at"])
    # The backoff's first delay is at most the base (1 s) after the attempt was recorded.
    assert due <= datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1)


@pytest.mark.parametrize("zone", ["-0000", "", "GMT"])
def test_a_retry_after_date_is_read_as_gmt_whatever_its_zone_says(app_with, keys, zone):
    """RFC 9110 5.6.7: an HTTP-date is GMT. RFC 5322's `-0000` (no zone information) and a date
    without a zone gave a naive datetime, which the worker could not compare with now."""
    settings = _settings(keys, delivery_retry_base_seconds=0.0)
    app = app_with(vapid_private_key=settings.vapid_private_key, webpush_allow_private=True)
    admin = _client(app)
    customer = create_user(admin)
    until = datetime.datetime.now(datetime.UTC).replace(microsecond=0) + datetime.timedelta(
        minutes=10
    )
    retry_after = f"{until.strftime('%a, %d %b %Y %H:%M:%S')} {zone}".strip()
    with Service(lambda request: (429, {"Retry-After": retry_after}, b"")) as service:
        browser = BrowserSubscription.new(f"{service.url}/wpush/1")
        device = _register(
            _client(app, customer), customer, platform="webpush", subscription=browser.to_json()
        )
        assert _run_worker(settings) == 1

    [welcome] = _deliveries(admin, customer, device)
    assert welcome["status"] == "pending"
    assert [a["response_status"] for a in welcome["attempts"]] == [429]
    assert datetime.datetime.fromisoformat(welcome["next_attempt_at"]) >= until


def test_push_transport_log_writes_each_notification_and_none_makes_no_deliveries(client, caplog):
    customer = create_user(client)
    client.post(f"/v1/users/{customer['id']}/devices", json={"platform": "fcm", "token": "t"})
    with caplog.at_level(logging.INFO, logger="shopapi.push"):
        assert _run_worker(Settings(push_transport="log")) == 1
    [line] = [r for r in caplog.records if r.message == "push notification"]
    assert line.fields["message"]["message"]["notification"]["title"] == "Welcome"
    _order_for(client, customer)
    assert fan_out(push_deliveries=False) > 0  # the product and the order: no push deliveries
    assert _run_worker(Settings(push_transport="log")) == 0


def test_a_new_user_is_welcomed_and_a_low_stock_product_notifies_nobody():
    data = orjson.dumps({"id": 7, "name": "Ada"}).decode()
    user = Event(
        id=4, type="user.created", resource_type="user", resource_id=7, owner_id=7, data=data
    )
    notification = push.notification_for(user)
    assert (notification.user_id, notification.title, notification.body) == (
        7,
        "Welcome",
        "Welcome, Ada: your account is ready",
    )
    low = Event(id=5, type="product.low_stock", resource_type="product", resource_id=3, data="{}")
    assert push.notification_for(low) is None
    assert not push.notifies(low)


def test_a_removed_devices_reason_says_the_status_never_what_the_service_wrote(app_with, keys):
    """A Web Push endpoint is any host the client chose: what it answers is not shown to the
    device's owner, only its status. The attempt log, an admin's to read, keeps it."""
    settings = _settings(keys)
    app = _webpush_app(app_with, settings)
    admin = _client(app)
    customer = create_user(admin)
    own = _client(app, customer)
    words = b"upstream db-7.internal:5432 refused the pool"
    with Service(lambda request: (410, {"Content-Type": "text/plain"}, words)) as service:
        browser = BrowserSubscription.new(f"{service.url}/gone/subscription-1")
        device = _register(own, customer, platform="webpush", subscription=browser.to_json())
        assert _run_worker(settings) == 1

    shown = own.get(f"/v1/users/{customer['id']}/devices/{device['id']}")
    assert shown.json()["removed_reason"] == (
        "the push service answered 410: the token is no longer valid"
    )
    assert "db-7" not in shown.text
    [delivery] = _deliveries(admin, customer, device)
    assert "db-7.internal" in delivery["attempts"][0]["error"]


def test_a_web_push_endpoint_the_settings_no_longer_allow_is_not_sent_to(app_with, keys):
    """The endpoint rule is checked again when the worker sends: a device registered before the
    rule (or the setting) changed gets nothing."""
    settings = _settings(keys, webpush_hosts=("push.services.mozilla.com",))
    app = app_with(webpush_allow_private=True)
    admin = _client(app)
    customer = create_user(admin)
    own = _client(app, customer)
    with Service(lambda request: 201) as service:
        browser = BrowserSubscription.new(f"{service.url}/wpush/v2/subscription-1")
        device = _register(own, customer, platform="webpush", subscription=browser.to_json())
        assert _run_worker(settings) == 1
    assert service.requests == []
    [delivery] = _deliveries(admin, customer, device)
    assert delivery["status"] == "failed"
    assert delivery["attempts"][0]["error"] == (
        "not sent: the endpoint is not at a push service this server sends to"
    )


def test_fan_out_goes_to_at_most_the_device_limit_the_most_recently_registered(app, client):
    """Devices beyond the limit (registered before it was lowered, say) get nothing: one event
    makes at most PUSH_DEVICES_PER_USER deliveries."""
    customer = create_user(client)
    own = _client(app, customer)
    devices = [_register(own, customer, platform="fcm", token=f"token-{n}") for n in range(5)]
    again = own.post(
        f"/v1/users/{customer['id']}/devices", json={"platform": "fcm", "token": "token-0"}
    )
    assert again.status_code == 200
    assert _run_worker(Settings(push_transport="log", push_devices_per_user=3)) == 3
    sent_to = [n for n, device in enumerate(devices) if _deliveries(client, customer, device)]
    assert sent_to == [0, 3, 4]


def test_one_owners_silent_push_services_leave_the_threads_to_another_owners_notification(
    app_with, keys
):
    """One owner's devices whose push service never answers hold at most their share of the
    worker's threads (one of four): another owner's notification goes out while theirs are
    still waiting, and theirs go out in turn once their service answers."""
    settings = _settings(
        keys, delivery_threads=4, delivery_poll_seconds=0.05, delivery_timeout_seconds=60.0
    )
    app = _webpush_app(app_with, settings)
    admin = _client(app)
    answering = threading.Event()

    def silent(request):
        answering.wait(WAIT_SECONDS)
        return 201

    stop = threading.Event()
    threads = []
    with Service(silent) as slow, Service(lambda request: 201) as fast:
        try:
            flooder, other = create_user(admin), create_user(admin)  # each welcomed: an event
            own = _client(app, flooder)
            for n in range(8):
                endpoint = f"{slow.url}/wpush/v2/silent-{n}"
                subscription = BrowserSubscription.new(endpoint).to_json()
                _register(own, flooder, platform="webpush", subscription=subscription)
            browser = BrowserSubscription.new(f"{fast.url}/wpush/v2/other")
            device = _register(
                _client(app, other), other, platform="webpush", subscription=browser.to_json()
            )
            threads = worker.start(settings, stop)

            def delivered_to_other():
                return PushDelivery.get_or_none(
                    (PushDelivery.device == device["id"]) & (PushDelivery.status == "delivered")
                )

            wait_for(delivered_to_other, "the other owner's welcome")
            wait_for(lambda: slow.requests, "the flooder's first push in flight")
            flooders = (
                PushDelivery.select(PushDelivery.id)
                .join(Device)
                .where(Device.user == flooder["id"])
            )
            assert PushAttempt.select().where(PushAttempt.delivery.in_(flooders)).count() == 0
            leased = flooders.where(PushDelivery.leased_until.is_null(False))
            assert leased.count() == 1
            assert len(slow.requests) == 1
            answering.set()
            wait_for(
                lambda: flooders.where(PushDelivery.status == "delivered").count() == 8,
                "the flooder's welcomes, once their service answers",
            )
        finally:
            answering.set()
            stop.set()
            for thread in threads:
                thread.join()
