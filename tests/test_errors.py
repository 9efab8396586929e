"""Every error a client can cause is a problem+json with the right status, never a 500."""

import json

import pytest
from support.helpers import assert_problem, create_product, create_user


def test_malformed_json_is_400(client):
    response = client.post(
        "/v1/products", content=b'{"sku": ', headers={"Content-Type": "application/json"}
    )
    assert "not valid JSON" in assert_problem(response, 400)["detail"]


@pytest.mark.parametrize(
    "body",
    [b"\xff\xfe{}", b'{"sku": "\xc3(", "name": "x", "price_cents": 1}'],
    ids=["bom-like", "broken-sequence"],
)
def test_a_body_that_is_not_utf8_is_400(client, body):
    response = client.post(
        "/v1/products", content=body, headers={"Content-Type": "application/json"}
    )
    assert "UTF-8" in assert_problem(response, 400)["detail"]


@pytest.mark.parametrize(
    "body",
    [
        b'{"sku": "NAN-1", "name": "x", "price_cents": NaN}',
        b'{"sku": "BIG-1", "name": "x", "price_cents": 1' + b"0" * 5000 + b"}",
        b"[" * 200_000 + b"]" * 200_000,
        b'{"sku": "SUR-1", "name": "\\ud800", "price_cents": 1}',
    ],
    ids=["nan", "huge-integer", "deep-nesting", "lone-surrogate"],
)
def test_json_that_python_parses_oddly_is_400(client, body):
    response = client.post(
        "/v1/products", content=body, headers={"Content-Type": "application/json"}
    )
    assert_problem(response, 400)


def test_nul_in_text_is_400(client):
    response = client.post(
        "/v1/products", json={"sku": "NUL-1", "name": "a\x00b", "price_cents": 1}
    )
    assert assert_problem(response, 400)["errors"][0]["pointer"] == "/name"


def test_undeclared_and_read_only_fields_are_400_each_named(client):
    response = client.post(
        "/v1/products",
        json={"sku": "X-1", "name": "x", "price_cents": -1, "id": 5, "colour": "red"},
    )
    body = assert_problem(response, 400)
    details = {(e["pointer"], e["detail"]) for e in body["errors"]}
    assert ("/id", "is read-only and cannot be sent") in details
    assert ("/price_cents", "is less than the minimum of 0") in details
    assert any(p == "" and "colour" in d for p, d in details)


def test_a_validation_error_names_the_rule_broken_but_never_the_value_sent(client, capsys):
    # Tokens are never shown back, to anyone: not in a 400's body, nor in any log line.
    devices = f"/v1/users/{create_user(client)['id']}/devices"
    capsys.readouterr()
    sent = [
        (
            client.post(
                "/v1/oauth/token",
                data={"grant_type": "refresh_token", "refresh_token": "SECRET-R" + "r" * 300},
            ),
            {"/refresh_token": "is longer than 200 characters"},
        ),
        (
            client.post(
                "/v1/oauth/token", data={"grant_type": "password", "password": "SECRET-P" * 40}
            ),
            {"/password": "is longer than 256 characters"},
        ),
        (
            client.post(devices, json={"platform": "fcm", "token": "SECRET-F with spaces"}),
            {"/token": "does not match '^[\\x21-\\x7E]+$'"},
        ),
        (
            client.post(devices, json={"platform": "apns", "token": "SECRET-A" * 10}),
            {"/token": "does not match '^[0-9A-Fa-f]{64,200}$'"},
        ),
        (
            client.post(
                devices,
                json={
                    "platform": "webpush",
                    "subscription": {
                        "endpoint": "wss://push.example.net/SECRET-E",
                        "keys": {"p256dh": "SECRET-K" * 11, "auth": "SECRET-U!"},
                    },
                },
            ),
            {
                "/subscription/endpoint": "does not match '^[Hh][Tt][Tt][Pp][Ss]?://'",
                "/subscription/keys/p256dh": "does not match '^[A-Za-z0-9_-]{87}=?$'",
                "/subscription/keys/auth": "does not match '^[A-Za-z0-9_-]{22}(==)?$'",
            },
        ),
        (
            client.get(
                "/v1/products", params={"created_at[gt]": "SECRET-D", "per_page": "SECRET-N"}
            ),
            {"created_at[gt]": "is not a 'date-time'", "per_page": "is not of type 'integer'"},
        ),
    ]
    for response, expected in sent:
        body = assert_problem(response, 400)
        errors = {e.get("pointer", e.get("parameter")): e["detail"] for e in body["errors"]}
        assert errors == expected, body
        assert "SECRET" not in response.text
    written = capsys.readouterr()
    assert written.out.count('"shopapi.requests"') == len(sent)  # each request's line was read
    assert "SECRET" not in written.out + written.err


def test_missing_body_is_400(client):
    response = client.post("/v1/products", headers={"Content-Type": "application/json"})
    assert_problem(response, 400)


def test_bad_parameters_are_400_each_named(client):
    body = assert_problem(client.get("/v1/products?page=0&per_page=101&colour=red"), 400)
    assert {e["parameter"] for e in body["errors"]} == {"page", "per_page", "colour"}
    assert_problem(client.get("/v1/products/99999999999"), 400)


def test_an_id_that_is_not_a_number_names_no_resource(client):
    assert_problem(client.get("/v1/products/abc"), 404)


def test_wrong_media_type_is_415(client):
    response = client.post("/v1/products", content=b"sku=A", headers={"Content-Type": "text/plain"})
    assert_problem(response, 415)


def test_unknown_path_is_404(client):
    assert_problem(client.get("/v1/widgets"), 404)
    assert_problem(client.get("/nowhere"), 404)


def test_an_encoded_slash_or_backslash_in_a_path_is_404(client):
    # Decoded, `/v1/products%2f1` would be `/v1/products/1`: a route that a proxy's rules for
    # `/v1/products/...` never saw, as `%2F` is no separator to it (RFC 3986 2.2).
    product = create_product(client)
    for path in (
        f"/v1/products%2f{product['id']}",
        f"/v1/products%2F{product['id']}",
        f"/v2/products%2f{product['id']}",
        f"/products%2F{product['id']}",
        "/v1%2fproducts",
        f"/v1/products%5c{product['id']}",
        "/v1%5Cproducts",
        "/healthz%2F",
    ):
        body = assert_problem(client.get(path), 404)
        assert "encoded" in body["detail"], path
        assert product["sku"] not in body["detail"]
    # Elsewhere than in the path, an encoded slash is only data.
    listed = client.get("/v1/products", params={"name[contains]": "a/b"})
    assert listed.status_code == 200, listed.text


def test_wrong_method_is_405_listing_every_allowed_method(client):
    response = client.delete("/v1/products")
    assert_problem(response, 405)
    assert response.headers["allow"] == "GET, HEAD, POST"
    response = client.post("/v1/orders/1")
    assert_problem(response, 405)
    assert response.headers["allow"] == "DELETE, GET, HEAD, PATCH, PUT"


def test_body_over_one_mebibyte_is_413(client):
    big = {"sku": "BIG-1", "name": "x", "price_cents": 1, "description": "d" * (1024 * 1024)}
    body = assert_problem(client.post("/v1/products", json=big), 413)
    assert "1048576" in body["detail"]


def test_chunked_body_over_one_mebibyte_is_413(client):
    def chunks():
        yield b'{"sku": "BIG-2", "name": "x", "price_cents": 1, "description": "'
        for _ in range(17):
            yield b"d" * 65536
        yield b'"}'

    response = client.post(
        "/v1/products", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert_problem(response, 413)
    assert client.get("/v1/products").json()["meta"]["total"] == 0


def test_a_chunked_body_within_the_limit_is_read(client):
    def chunks():
        yield b'{"sku": "CHUNK-1", "name": "x", '
        yield b'"price_cents": 1}'

    response = client.post(
        "/v1/products", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 201, response.text


def test_a_sane_request_id_is_echoed_and_an_insane_one_replaced(client, capsys, caplog):
    response = client.get("/v1/products/999", headers={"X-Request-ID": "abc-123"})
    assert response.headers["x-request-id"] == "abc-123"
    assert assert_problem(response, 404)["request_id"] == "abc-123"
    capsys.readouterr()
    response = client.get("/v1/products", headers={"X-Request-ID": "bad id\twith spaces"})
    assert response.headers["x-request-id"] != "bad id\twith spaces"
    assert len(response.headers["x-request-id"]) == 32
    # Replacing a client's id is no news for the log (any client could flood it): only the
    # request's own JSON line is written.
    written = capsys.readouterr()
    assert written.err == ""
    assert not [record for record in caplog.records if record.name == "asgi_correlation_id"]
    assert [json.loads(line)["logger"] for line in written.out.splitlines()] == ["shopapi.requests"]


def test_sql_looking_input_is_only_data(client):
    product = create_product(client, name="'; DROP TABLE product; --")
    assert client.get(f"/v1/products/{product['id']}").json()["name"] == product["name"]
    assert client.get("/v1/products").json()["meta"]["total"] == 1
