"""CORS as configured: the allowed origins get the headers on every response (test_observability
checks each kind of response), other origins get none, a refused preflight is a problem
document, and without CORS_ORIGINS the API is same-origin only."""

import pytest
from support.helpers import assert_problem, bearer

ORIGIN = "https://app.example.com"


@pytest.fixture
def cors_client(app_with):
    return app_with(cors_origins=(ORIGIN,)).test_client()


def test_a_preflight_answers_what_the_api_accepts(cors_client):
    response = cors_client.options(
        "/v1/orders/1",
        headers={
            "Origin": ORIGIN,
            "Access-Control-Request-Method": "PATCH",
            "Access-Control-Request-Headers": "Authorization, Content-Type, X-API-Key",
        },
    )
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == ORIGIN
    assert "PATCH" in response.headers["access-control-allow-methods"]
    allowed = response.headers["access-control-allow-headers"].lower()
    assert {"authorization", "content-type", "x-api-key"} <= set(
        allowed.replace(" ", "").split(",")
    )
    assert int(response.headers["access-control-max-age"]) > 0
    assert "Origin" in response.headers["vary"]
    assert "access-control-allow-credentials" not in response.headers


def test_another_origin_gets_no_cors_headers_and_a_refused_preflight(cors_client):
    other = {"Origin": "https://evil.example.com"}
    response = cors_client.get("/v1/products", headers={**bearer(), **other})
    assert response.status_code == 200
    assert "access-control-allow-origin" not in response.headers
    assert "Origin" in response.headers["vary"]  # a cache must not hand it to another origin
    refused = cors_client.options(
        "/v1/products", headers={**other, "Access-Control-Request-Method": "GET"}
    )
    body = assert_problem(refused, 400)
    assert "origin" in body["detail"]
    assert "access-control-allow-origin" not in refused.headers


def test_a_request_header_the_api_does_not_take_is_refused_in_preflight(cors_client):
    refused = cors_client.options(
        "/v1/products",
        headers={
            "Origin": ORIGIN,
            "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "X-Debug",
        },
    )
    assert "headers" in assert_problem(refused, 400)["detail"]


def test_any_origin_is_answered_with_a_star_without_credentials(app_with):
    client = app_with(cors_origins=("*",)).test_client()
    response = client.get("/v1/products", headers={**bearer(), "Origin": "https://x.example"})
    assert response.headers["access-control-allow-origin"] == "*"
    assert "access-control-allow-credentials" not in response.headers


def test_credentials_are_allowed_only_for_listed_origins(app_with):
    client = app_with(cors_origins=(ORIGIN,), cors_allow_credentials=True).test_client()
    response = client.get("/v1/products", headers={**bearer(), "Origin": ORIGIN})
    assert response.headers["access-control-allow-origin"] == ORIGIN
    assert response.headers["access-control-allow-credentials"] == "true"


def test_without_cors_origins_the_api_is_same_origin_only(anonymous):
    response = anonymous.get("/v1/products", headers={**bearer(), "Origin": ORIGIN})
    assert response.status_code == 200
    assert "access-control-allow-origin" not in response.headers
    preflight = anonymous.options(
        "/v1/products", headers={"Origin": ORIGIN, "Access-Control-Request-Method": "GET"}
    )
    assert "access-control-allow-origin" not in preflight.headers
