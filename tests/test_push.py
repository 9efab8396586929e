"""Push delivery as the worker makes it (its fan-out and one delivery thread's job, called
here), to real local push services that check what the real ones check: Web Push (VAPID, an
aes128gcm body a browser's keys decrypt), FCM HTTP v1 (an OAuth token from the service
account's JWT grant) and APNs (HTTP/2 over TLS, an ES256 provider token)."""

import time
import urllib.parse

import orjson
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from support.helpers import bearer, bearer_for, create_product, create_user, place_order
from support.push_services import (
    BrowserSubscription,
    Service,
    self_signed_certificate,
    unb64url,
    verify_es256,
)

from models.delivery import Retries
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
        "webhook_timeout_seconds": 10.0,
        **changes,
    }
    return Settings(**values)


def _run_worker(settings: Settings) -> int:
    """What the worker's threads do until nothing is due: fan out, then push. Returns how many
    attempts were made."""
    senders = sending.senders(settings)
    retries = Retries(settings.webhook_max_attempts, settings.webhook_retry_base_seconds)
    while fan_out():
        pass
    attempts = 0
    while push_one(senders, retries, settings.webhook_timeout_seconds):
        attempts += 1
    return attempts


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
    app = app_with(
        vapid_private_key=settings.vapid_private_key,
        vapid_subject=settings.vapid_subject,
        webpush_allow_private=True,
    )
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
    assert "410" in removed["removed_reason"]
    tried, untried = _deliveries(admin, customer, gone)
    assert [a["response_status"] for a in tried["attempts"]] == [410]
    assert (tried["status"], untried["status"], untried["attempts"]) == ("failed", "failed", [])
