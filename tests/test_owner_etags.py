"""A customer's list ETag moves only with what the customer sees: other customers' orders,
accounts, events, devices and webhooks leave it (and its 304s, where the list takes
`If-None-Match`) as it was, so polling tells nothing of them; the customer's own rows move it.
Answered before the rows are read, as every list tag is."""

from support.helpers import bearer, bearer_for, create_product, create_user, place_order

from models import Delivery, DeliveryAttempt, PushAttempt, PushDelivery
from models.db import database
from models.delivery import Retries
from shopapi.events.worker import fan_out


def _revalidated(app, user: dict, path: str, tag: str):
    as_user = app.test_client()
    as_user.headers.update(bearer_for(user))
    return as_user.get(path, headers={"If-None-Match": tag})


def test_others_orders_leave_a_customers_order_list_tag_and_its_own_move_it(app, client):
    alice, bob = create_user(client), create_user(client)
    product = create_product(client, stock=100)
    place_order(client, alice, (product, 1))
    as_alice = app.test_client()
    as_alice.headers.update(bearer_for(alice))
    for path in ("/v1/orders", "/v3/orders?expand=user", f"/v1/users/{alice['id']}/orders"):
        tag = as_alice.get(path).headers["etag"]
        for _ in range(2):  # the first revalidation in Flask, the next before it
            for _ in range(3):
                assert place_order(client, bob, (product, 1)).status_code == 201
            create_user(client)
            assert _revalidated(app, alice, path, tag).status_code == 304, path

        assert place_order(client, alice, (product, 1)).status_code == 201
        changed = _revalidated(app, alice, path, tag)
        assert changed.status_code == 200, path
        assert changed.headers["etag"] != tag


def test_a_customers_own_user_list_is_unmoved_by_new_users(app, client):
    alice = create_user(client)
    as_alice = app.test_client()
    as_alice.headers.update(bearer_for(alice))
    tag = as_alice.get("/v1/users").headers["etag"]
    create_user(client)
    assert _revalidated(app, alice, "/v1/users", tag).status_code == 304
    client.patch(f"/v1/users/{alice['id']}", json={"name": "Alice B."})
    assert _revalidated(app, alice, "/v1/users", tag).status_code == 200


def test_an_admins_list_still_moves_with_everyones_orders(app, client):
    alice = create_user(client)
    product = create_product(client, stock=10)
    tag = client.get("/v1/orders").headers["etag"]
    place_order(client, alice, (product, 1))
    assert client.get("/v1/orders", headers={"If-None-Match": tag}).status_code == 200


def _tag(caller, path: str) -> str:
    response = caller.get(path)
    assert response.status_code == 200, response.text
    return response.headers["etag"]


def test_others_events_leave_a_customers_event_feed_tag_and_its_own_and_the_catalogues_move_it(
    app, client
):
    alice, bob = create_user(client), create_user(client)
    product = create_product(client, stock=100)
    place_order(client, alice, (product, 1))
    as_alice = app.test_client()
    as_alice.headers.update(bearer_for(alice))
    for path in ("/v1/events", "/v2/events?resource_type=order", "/v3/events?sort=-id"):
        tag = _tag(as_alice, path)
        bobs = place_order(client, bob, (product, 1)).json()
        client.patch(f"/v1/orders/{bobs['id']}", json={"status": "cancelled"})
        create_user(client)
        assert _tag(as_alice, path) == tag, path

        assert place_order(client, alice, (product, 1)).status_code == 201
        assert _tag(as_alice, path) != tag, path

    tag = _tag(as_alice, "/v1/events")
    create_product(client)  # the catalogue's events are every product reader's
    assert _tag(as_alice, "/v1/events") != tag


def test_the_worker_fanning_out_events_moves_no_customers_feed(app, client):
    alice = create_user(client)
    product = create_product(client, stock=100)
    place_order(client, alice, (product, 1))
    as_alice = app.test_client()
    as_alice.headers.update(bearer_for(alice))
    tags = _tag(as_alice, "/v1/events"), _tag(client, "/v1/events")
    assert fan_out() > 0  # marks the events dispatched, which no feed shows
    assert _tag(as_alice, "/v1/events") == tags[0]
    assert _tag(client, "/v1/events") != tags[1]  # an admin's follows the whole table, as before


def test_a_feed_without_the_catalogue_is_unmoved_by_it(app, client):
    alice = create_user(client)
    product = create_product(client, stock=100)
    orders_only = app.test_client()
    orders_only.headers.update(bearer(str(alice["id"]), ["orders:read"]))
    tag = _tag(orders_only, "/v1/events")
    create_product(client)
    client.patch(f"/v1/products/{product['id']}", json={"name": "Renamed"})
    assert _tag(orders_only, "/v1/events") == tag
    place_order(client, alice, (product, 1))
    assert _tag(orders_only, "/v1/events") != tag


def test_a_feed_of_credentials_acting_for_no_user_moves_with_the_catalogue_alone(app, client):
    alice = create_user(client)
    product = create_product(client, stock=100)
    no_user = app.test_client()
    no_user.headers.update(bearer("client:reader", ["products:read", "orders:read"]))
    tag = _tag(no_user, "/v1/events")
    place_order(client, alice, (product, 1))
    create_user(client)
    assert _tag(no_user, "/v1/events") == tag
    create_product(client)
    assert _tag(no_user, "/v1/events") != tag


def test_an_admins_feed_still_moves_with_everyones_events(client):
    alice = create_user(client)
    product = create_product(client, stock=10)
    tag = _tag(client, "/v1/events")
    place_order(client, alice, (product, 1))
    assert _tag(client, "/v1/events") != tag


def test_others_devices_leave_a_users_device_list_tag_and_its_own_move_it(app, client):
    alice, bob = create_user(client), create_user(client)
    path, bobs = f"/v1/users/{alice['id']}/devices", f"/v1/users/{bob['id']}/devices"
    as_alice, as_bob = app.test_client(), app.test_client()
    as_alice.headers.update(bearer_for(alice))
    as_bob.headers.update(bearer_for(bob))
    assert as_alice.post(path, json={"platform": "fcm", "token": "alice-1"}).status_code == 201
    for n, caller in enumerate((as_alice, client)):  # the user, and an admin reading them
        tag = _tag(caller, path)
        device = as_bob.post(bobs, json={"platform": "fcm", "token": f"bob-{n}"}).json()
        as_bob.delete(f"{bobs}/{device['id']}")
        as_bob.post(bobs, json={"platform": "apns", "token": f"{n:02d}" * 32})
        assert _tag(caller, path) == tag
        # A token that moves from Bob to Alice is a change of her list.
        moved = as_alice.post(path, json={"platform": "apns", "token": f"{n:02d}" * 32}).json()
        assert _tag(caller, path) != tag
        as_alice.delete(f"{path}/{moved['id']}")


def test_others_webhooks_leave_a_partners_webhook_list_tag_and_its_own_move_it(app, client):
    partner, other = create_user(client, role="partner"), create_user(client, role="partner")
    as_partner, as_other = app.test_client(), app.test_client()
    as_partner.headers.update(bearer_for(partner))
    as_other.headers.update(bearer_for(other))
    no_user = app.test_client()
    no_user.headers.update(bearer("client:hooks", ["webhooks"]))
    hook = {"url": "https://hooks.example.com/owned", "events": ["order.created"]}
    as_partner.post("/v1/webhooks", json=hook)
    callers = (as_partner, no_user, client)
    tags = [_tag(caller, "/v1/webhooks") for caller in callers]
    others = as_other.post("/v1/webhooks", json=hook).json()
    as_other.patch(f"/v1/webhooks/{others['id']}", json={"description": "theirs"})
    client.post("/v1/webhooks", json=hook)  # an admin's, which no one owns
    assert [_tag(caller, "/v1/webhooks") for caller in callers[:2]] == tags[:2]
    assert _tag(client, "/v1/webhooks") != tags[2]  # an admin sees them all

    as_partner.post("/v1/webhooks", json=hook)
    assert _tag(as_partner, "/v1/webhooks") != tags[0]


def _attempted(model, attempt_model, delivery_id: int) -> None:
    """The worker's record of a failed attempt at a delivery (none is sent from a test)."""
    with database.atomic():
        delivery = model.get_by_id(delivery_id)
        outcome = {"duration_ms": 5, "response_status": 500, "error": None}
        delivery.record_attempt(attempt_model, outcome, lambda number: "retry", Retries(5, 1.0))


def _revalidated_by(caller, path: str, tag: str) -> int:
    return caller.get(path, headers={"If-None-Match": tag}).status_code


def test_others_deliveries_leave_a_partners_delivery_list_tag_and_its_own_move_it(app, client):
    partner, other = create_user(client, role="partner"), create_user(client, role="partner")
    as_partner, as_other = app.test_client(), app.test_client()
    as_partner.headers.update(bearer_for(partner))
    as_other.headers.update(bearer_for(other))
    hook = {"url": "https://hooks.example.com/owned", "events": ["product.created"]}
    mine = as_partner.post("/v1/webhooks", json=hook).json()
    theirs = as_other.post("/v1/webhooks", json=hook).json()
    create_product(client)
    assert fan_out() > 0  # a delivery to each webhook
    path = f"/v1/webhooks/{mine['id']}/deliveries"
    [delivery] = as_partner.get(path).json()["data"]
    event = {"event_id": delivery["event_id"]}
    for caller in (as_partner, client):  # the partner, and an admin reading the partner's
        tag = _tag(caller, path)
        for _ in range(2):  # the first revalidation in Flask, the next before it
            redelivered = as_other.post(f"/v1/webhooks/{theirs['id']}/deliveries", json=event)
            assert redelivered.status_code == 201, redelivered.text
            _attempted(Delivery, DeliveryAttempt, redelivered.json()["id"])
            assert _revalidated_by(caller, path, tag) == 304

        _attempted(Delivery, DeliveryAttempt, delivery["id"])  # an attempt at the partner's own
        assert _revalidated_by(caller, path, tag) == 200
        tag = _tag(caller, path)
        assert as_partner.post(path, json=event).status_code == 201
        assert _revalidated_by(caller, path, tag) == 200


def test_an_admins_webhook_deliveries_still_move_with_everyones(app, client):
    partner = create_user(client, role="partner")
    as_partner = app.test_client()
    as_partner.headers.update(bearer_for(partner))
    hook = {"url": "https://hooks.example.com/owned", "events": ["product.created"]}
    admins = client.post("/v1/webhooks", json=hook).json()
    theirs = as_partner.post("/v1/webhooks", json=hook).json()
    create_product(client)
    assert fan_out() > 0
    path = f"/v1/webhooks/{admins['id']}/deliveries"
    tag = _tag(client, path)
    [delivery] = as_partner.get(f"/v1/webhooks/{theirs['id']}/deliveries").json()["data"]
    _attempted(Delivery, DeliveryAttempt, delivery["id"])
    assert _revalidated_by(client, path, tag) == 200


def test_others_push_deliveries_leave_a_devices_delivery_list_tag_and_its_own_move_it(app, client):
    alice, bob = create_user(client), create_user(client)
    devices = {}
    for user in (alice, bob):
        path = f"/v1/users/{user['id']}/devices"
        registered = client.post(path, json={"platform": "fcm", "token": f"token-{user['id']}"})
        assert registered.status_code == 201, registered.text
        devices[user["id"]] = f"{path}/{registered.json()['id']}/deliveries"
    product = create_product(client, stock=100)
    fan_out()  # their welcomes
    path = devices[alice["id"]]
    [welcome] = client.get(path).json()["data"]
    tag = _tag(client, path)
    for _ in range(2):
        assert place_order(client, bob, (product, 1)).status_code == 201
        assert fan_out() > 0
        for bobs in client.get(devices[bob["id"]]).json()["data"]:
            _attempted(PushDelivery, PushAttempt, bobs["id"])
        assert _revalidated_by(client, path, tag) == 304

    _attempted(PushDelivery, PushAttempt, welcome["id"])
    assert _revalidated_by(client, path, tag) == 200
    tag = _tag(client, path)
    assert place_order(client, alice, (product, 1)).status_code == 201
    assert fan_out() > 0
    assert _revalidated_by(client, path, tag) == 200


def test_every_list_revalidates_to_a_304(app, client):
    partner = create_user(client, role="partner")
    as_partner = app.test_client()
    as_partner.headers.update(bearer_for(partner))
    webhook = as_partner.post(
        "/v1/webhooks", json={"url": "https://hooks.example.com/a", "events": ["order.created"]}
    ).json()
    device = client.post(
        f"/v1/users/{partner['id']}/devices", json={"platform": "fcm", "token": "t-304"}
    ).json()
    paths = (
        "/v1/oauth/clients",
        "/v1/api-keys",
        "/v2/events",
        f"/v3/webhooks/{webhook['id']}/deliveries",
        f"/v1/users/{partner['id']}/devices",
        f"/v1/users/{partner['id']}/devices/{device['id']}/deliveries",
    )
    for caller, path in [(client, path) for path in paths] + [(as_partner, "/v1/webhooks")]:
        tag = _tag(caller, path)
        for _ in range(2):  # in Flask, then before it
            answer = caller.get(path, headers={"If-None-Match": tag})
            assert answer.status_code == 304, path
            assert answer.headers["etag"] == tag
