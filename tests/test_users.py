from support.helpers import (
    assert_problem,
    bearer,
    bearer_for,
    create_product,
    create_user,
    place_order,
)

from models import User


def test_password_is_hashed_and_never_returned(client):
    response = client.post(
        "/v1/users", json={"email": "Ada@Example.com", "name": "Ada", "password": "s3cret-pass"}
    )
    assert response.status_code == 201
    user = response.json()
    assert "password" not in user and "password_hash" not in user
    assert user["email"] == "ada@example.com"
    assert user["role"] == "customer"
    stored = User.get_by_id(user["id"])
    assert stored.password_hash.startswith("scrypt$")
    assert "s3cret-pass" not in stored.password_hash
    assert stored.check_password("s3cret-pass")
    assert not stored.check_password("s3cret-pasS")


def test_email_is_unique_regardless_of_case(client):
    create_user(client, email="same@example.com")
    body = assert_problem(
        client.post(
            "/v1/users", json={"email": "SAME@example.com", "name": "B", "password": "12345678"}
        ),
        409,
    )
    assert "email" in body["detail"]


def test_short_password_and_bad_email_are_named(client):
    body = assert_problem(
        client.post("/v1/users", json={"email": "nope", "name": "B", "password": "short"}), 400
    )
    assert {e["pointer"] for e in body["errors"]} == {"/email", "/password"}


def test_user_with_orders_cannot_be_deleted(client):
    from support.helpers import create_product, place_order

    user = create_user(client)
    assert place_order(client, user, (create_product(client), 1)).status_code == 201
    assert_problem(client.delete(f"/v1/users/{user['id']}"), 409)
    assert client.get(f"/v1/users/{user['id']}").status_code == 200


def test_a_users_orders_are_listed_under_the_user(client):
    from support.helpers import create_product, place_order

    ada, bob = create_user(client), create_user(client)
    product = create_product(client)
    mine = place_order(client, ada, (product, 1)).json()
    place_order(client, bob, (product, 1))
    response = client.get(f"/v1/users/{ada['id']}/orders")
    assert response.status_code == 200
    assert [order["id"] for order in response.json()["data"]] == [mine["id"]]
    assert_problem(client.get("/v1/users/999999/orders"), 404)


def test_an_id_filter_on_a_users_orders_filters_the_orders_not_the_user(client):
    """`id` is both the path's user and the list's filter on an order's id."""
    ada, bob = create_user(client), create_user(client)
    product = create_product(client)
    adas = place_order(client, ada, (product, 1)).json()
    place_order(client, ada, (product, 1))
    listed = client.get(f"/v1/users/{ada['id']}/orders?id={adas['id']}").json()["data"]
    assert [order["id"] for order in listed] == [adas["id"]]
    assert client.get(f"/v1/users/{bob['id']}/orders?id={adas['id']}").json()["data"] == []
    assert_problem(client.get(f"/v1/users/999999/orders?id={adas['id']}"), 404)


def test_a_user_learns_which_emails_are_taken_only_a_few_times_a_day(app_with, client):
    """A taken email is 409, which tells that someone has it. Users are created by admins only,
    so a customer could otherwise test a list of emails at the API's rate: without `admin`, 5
    taken emails a day, then no more answers until the day is over."""
    limited = app_with(rate_limit_scale=1).test_client()
    carol = create_user(client, email="carol@example.com", password="carol-password")
    taken = [create_user(client)["email"] for _ in range(6)]
    as_carol = bearer_for(carol)
    proof = {"current_password": "carol-password"}

    def change_email(email, method="PATCH"):
        body = {"email": email, **proof}
        if method == "PUT":
            body.update(name=carol["name"], password="carol-password")
        url = f"/v1/users/{carol['id']}"
        return limited.request(method, url, json=body, headers=as_carol)

    assert_problem(change_email(taken[0], "PUT"), 409)  # replacing and patching count together
    for email in taken[1:5]:
        assert_problem(change_email(email), 409)
    refused = change_email(taken[5])
    body = assert_problem(refused, 429)
    assert "email" in body["detail"]
    assert 0 < int(refused.headers["retry-after"]) <= 24 * 3600
    # Every change of email is refused now, to a free one too: no answer tells them apart.
    assert_problem(change_email("carol.new@example.com"), 429)
    assert client.get(f"/v1/users/{carol['id']}").json()["email"] == "carol@example.com"
    # What does not change the email goes on; an admin (who lists every user) is not counted.
    url = f"/v1/users/{carol['id']}"
    assert limited.patch(url, json={"name": "Carol C."}, headers=as_carol).status_code == 200
    restated = limited.patch(url, json={"email": carol["email"], **proof}, headers=as_carol)
    assert restated.status_code == 200
    assert_problem(limited.patch(url, json={"email": taken[5]}, headers=bearer()), 409)
