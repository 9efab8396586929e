"""Rate limits as the spec declares them: per client and operation, with RateLimit-* headers on
every counted response and a 429 problem with Retry-After beyond; refused credentials throttled
per address; one quota shared by every server process through Redis; and requests still served
when Redis goes away, with the limits back when it returns.

The spec's limits are scaled down here (RATE_LIMIT_SCALE) so a test reaches them in a few requests.
"""

import contextlib
import os
import time
import uuid

import httpx
import pytest
import redis
import yaml
from helpers import assert_problem, bearer
from live import live_server
from metrics_text import sample_sum
from tcp_proxy import TcpProxy

from app import SPEC_DIR
from shopapi.operations import operations_of
from shopapi.rate_limits import scaled

REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
METRICS_TOKEN = "metrics-token-for-tests"
# The spec's 1000 a minute becomes 5, its 20 a minute (token endpoint, refused credentials) 1.
SCALE = 0.005


def _reader(subject: str | None = None) -> dict:
    """A token of its own client, so that no other test has spent its quota."""
    return bearer(subject=subject or f"client:{uuid.uuid4().hex}", scopes=["products:read"])


@pytest.fixture
def limited(app_with):
    return app_with(rate_limit_scale=SCALE).test_client()


def test_every_operation_declares_a_limit_that_parses():
    spec = yaml.safe_load((SPEC_DIR / "openapi.yaml").read_text())
    for operation in operations_of(spec):
        assert scaled(operation.rate_limit, 1).amount >= 1, operation.id
    assert scaled(spec["x-rate-limit-failed-auth"], 1).amount >= 1
    token_endpoint = next(op for op in operations_of(spec) if op.id == "issue_token")
    assert token_endpoint.rate_limit == "20/minute"


def test_a_client_gets_its_quota_with_headers_then_429(limited):
    headers = _reader()
    for remaining in (4, 3, 2, 1, 0):
        response = limited.get("/v1/products", headers=headers)
        assert response.status_code == 200
        assert response.headers["ratelimit-limit"] == "5"
        assert response.headers["ratelimit-remaining"] == str(remaining)
        assert 0 < int(response.headers["ratelimit-reset"]) <= 60
        assert response.headers["ratelimit-policy"] == "5;w=60"
    refused = limited.get("/v1/products", headers=headers)
    body = assert_problem(refused, 429)
    assert "5 times every 60 seconds" in body["detail"]
    assert 0 < int(refused.headers["retry-after"]) <= 60
    assert refused.headers["ratelimit-remaining"] == "0"
    assert refused.headers["ratelimit-policy"] == "5;w=60"


def test_quotas_are_per_client_and_per_operation(limited):
    spent = _reader()
    for _ in range(5):
        limited.get("/v1/products", headers=spent)
    assert limited.get("/v1/products", headers=spent).status_code == 429
    assert limited.get("/v1/products", headers=_reader()).status_code == 200
    assert limited.get("/v1/products/1", headers=spent).status_code == 404  # another operation


def test_an_error_response_carries_the_headers_too(limited):
    headers = _reader()
    response = limited.get("/v1/products?per_page=0", headers=headers)
    assert_problem(response, 400)
    assert response.headers["ratelimit-remaining"] == "4"


def test_an_api_key_is_its_own_client(limited, app_with):
    admin = bearer()
    user = limited.post(
        "/v1/users",
        json={"email": "partner@example.com", "name": "P", "password": "12345678", "role": "admin"},
        headers=admin,
    ).json()
    key = limited.post(
        "/v1/api-keys",
        json={"name": "k", "scopes": ["products:read"], "owner_id": user["id"]},
        headers=admin,
    ).json()["key"]
    by_key = {"X-API-Key": key}
    for _ in range(5):
        assert limited.get("/v1/products", headers=by_key).status_code == 200
    assert_problem(limited.get("/v1/products", headers=by_key), 429)
    assert limited.get("/v1/products", headers=_reader()).status_code == 200


def test_the_token_endpoint_counts_per_address_whatever_the_outcome(limited):
    form = {"grant_type": "password", "username": "nobody@example.com", "password": "guess-1"}
    # 20 a minute scaled by 0.005 is 1: the second guess from this address is refused.
    assert limited.post("/v1/oauth/token", data=form).status_code == 400
    refused = limited.post("/v1/oauth/token", data={**form, "password": "guess-2"})
    assert_problem(refused, 429)
    assert int(refused.headers["retry-after"]) > 0


def test_refused_credentials_block_the_address_until_the_window_ends(app_with):
    # 20 a minute scaled by 0.15 is 3 refused attempts.
    client = app_with(rate_limit_scale=0.15).test_client()
    no_credentials = client.get("/v1/products")
    assert_problem(no_credentials, 401)  # not an attempt: it does not count
    assert_problem(client.get("/v1/products", headers={"Authorization": "Bearer guess-1"}), 401)
    assert_problem(client.get("/v1/products", headers={"X-API-Key": "shk_guess-2"}), 401)
    # A client secret refused by the token endpoint (a handler's 401, not security's) counts too.
    form = {"grant_type": "client_credentials"}
    refused_client = client.post("/v1/oauth/token", data=form, auth=("nobody", "guess-3"))
    assert refused_client.status_code == 401
    # Blocked now, even with good credentials, and before they are checked.
    blocked = client.get("/v1/products", headers=_reader())
    body = assert_problem(blocked, 429)
    assert "failed authentication" in body["detail"]
    assert 0 < int(blocked.headers["retry-after"]) <= 60
    # A request without credentials is not a guess: still just a 401.
    assert_problem(client.get("/v1/products"), 401)


# Redis: the quota shared between processes, and what happens when it goes away.


def _redis_or_skip():
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1).ping()
    except redis.RedisError as error:
        reason = f"Redis unreachable at {REDIS_URL} ({error})"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI must test the shared quota")
        pytest.skip(reason)


def _metric(base: str, name: str) -> float:
    scrape = httpx.get(f"{base}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    return sample_sum(scrape.text, name)


@pytest.mark.slow
def test_two_server_processes_share_one_quota_in_redis(app, database_url):
    _redis_or_skip()
    settings = {"RATELIMIT_STORAGE_URI": REDIS_URL, "RATE_LIMIT_SCALE": str(SCALE)}
    with (
        live_server(database_url, **settings) as first,
        live_server(database_url, **settings) as second,
    ):
        headers = _reader()
        remaining, resets = [], []
        for base in (first, second, first, second, first):
            response = httpx.get(f"{base}/v1/products", headers=headers)
            assert response.status_code == 200
            remaining.append(response.headers["ratelimit-remaining"])
            resets.append(int(response.headers["ratelimit-reset"]))
        assert remaining == ["4", "3", "2", "1", "0"]
        # One window, opened by the first server: the second learns its end from Redis.
        assert all(0 < reset <= 60 for reset in resets)
        assert max(resets) - min(resets) <= 1
        for base in (second, first):
            assert_problem(httpx.get(f"{base}/v1/products", headers=headers), 429)


@contextlib.contextmanager
def _redis_behind_a_proxy():
    parts = httpx.URL(REDIS_URL)
    proxy = TcpProxy(parts.host, parts.port or 6379)
    proxy.start()
    try:
        yield f"redis://127.0.0.1:{proxy.port}{parts.path}", proxy
    finally:
        proxy.stop()


@pytest.mark.slow
def test_without_redis_requests_are_served_and_limits_resume_when_it_returns(app, database_url):
    _redis_or_skip()
    with _redis_behind_a_proxy() as (url, proxy):
        settings = {
            "RATELIMIT_STORAGE_URI": url,
            "RATE_LIMIT_SCALE": str(SCALE),
            "METRICS_TOKEN": METRICS_TOKEN,
        }
        with live_server(database_url, **settings) as base:
            headers = _reader()
            for _ in range(5):
                assert httpx.get(f"{base}/v1/products", headers=headers).status_code == 200
            assert_problem(httpx.get(f"{base}/v1/products", headers=headers), 429)
            errors_before = _metric(base, "rate_limit_storage_errors_total")

            proxy.stop()
            for _ in range(3):  # fail open: served, without limit headers
                served = httpx.get(f"{base}/v1/products", headers=headers)
                assert served.status_code == 200
                assert "ratelimit-remaining" not in served.headers
            assert _metric(base, "rate_limit_storage_errors_total") >= errors_before + 3

            proxy.start()  # the same port again
            deadline = time.monotonic() + 60
            while True:
                response = httpx.get(f"{base}/v1/products", headers=headers)
                if response.status_code == 429 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            # The count kept in Redis is back in force: this client is still over its quota.
            assert_problem(response, 429)
