"""A customer's list ETag moves only with what the customer sees: other customers' orders and
accounts leave it (and its 304s) as it was, so polling tells nothing of them; the customer's own
order moves it. Answered before the rows are read, as every list tag is."""

from support.helpers import bearer_for, create_product, create_user, place_order


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
