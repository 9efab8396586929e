"""Rate limits as the spec declares them: per client and operation, with RateLimit-* headers on
every counted response and a 429 problem with Retry-After beyond; refused credentials throttled
per address; one quota shared by every server process through Redis; and requests still served
when Redis goes away, with the limits back when it returns.

The spec's limits are scaled down here (RATE_LIMIT_SCALE) so a test reaches them in a few requests.
"""

import asyncio
import contextlib
import itertools
import os
import threading
import time
import uuid

import httpx
import limits
import pytest
import redis
from support.helpers import ONE_DATABASE, assert_problem, bearer, create_user
from support.live import live_server, production_server
from support.metrics_text import sample_sum
from support.tcp_proxy import TcpProxy

from app import SPEC_DIR
from shopapi.contract import spec_files
from shopapi.contract.operations import operations_of
from shopapi.pipeline.account_limits import ATTEMPT_KINDS, AttemptGate, AttemptLimit
from shopapi.pipeline.forwarded import TrustedProxies
from shopapi.pipeline.limit_counter import LimitCounter, TooManyRequests, scaled, scaled_each

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
    spec = spec_files.load(SPEC_DIR / "openapi.yaml")
    for operation in operations_of(spec):
        assert scaled(operation.rate_limit, 1).amount >= 1, operation.id
    assert scaled(spec["x-rate-limit-failed-auth"], 1).amount >= 1
    token_endpoint = next(op for op in operations_of(spec) if op.id == "issue_token")
    assert token_endpoint.rate_limit == "20/minute"
    attempt_limits = [limit for op in operations_of(spec) for limit in op.attempt_limits]
    assert {name for name, _ in attempt_limits} == set(ATTEMPT_KINDS)
    for _, windows in attempt_limits:
        assert all(limit.amount >= 1 for limit in scaled_each(windows, 1)), windows


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


def test_a_revalidation_is_let_in_by_the_count_and_counted_unless_answered_304(limited):
    headers = _reader()
    first = limited.get("/v1/products", headers=headers)
    assert first.headers["ratelimit-remaining"] == "4"
    current = {**headers, "If-None-Match": first.headers["etag"]}
    for _ in range(3):
        revalidated = limited.get("/v1/products", headers=current)
        assert revalidated.status_code == 304
        assert revalidated.headers["ratelimit-remaining"] == "4"
    stale = limited.get("/v1/products", headers={**headers, "If-None-Match": 'W/"old"'})
    assert stale.status_code == 200
    assert stale.headers["ratelimit-remaining"] == "3"
    refused = limited.get("/v1/products?per_page=0", headers=current)
    assert_problem(refused, 400)
    assert refused.headers["ratelimit-remaining"] == "2"
    for remaining in ("1", "0"):
        response = limited.get("/v1/products", headers=headers)
        assert response.headers["ratelimit-remaining"] == remaining
    over = limited.get("/v1/products", headers=current)
    assert_problem(over, 429)
    assert over.headers["ratelimit-remaining"] == "0"


def test_304s_have_a_budget_of_ten_times_the_limit_then_count(limited):
    """`If-None-Match: *` is a 304 for any list (RFC 9110 §13.1.2: a current representation
    exists), and each 304 reads the database: 50 are free at a limit of 5, then they count."""
    headers = {**_reader(), "If-None-Match": "*"}
    for _ in range(50):
        free = limited.get("/v1/products", headers=headers)
        assert free.status_code == 304
        assert free.headers["ratelimit-remaining"] == "5"
    for remaining in ("4", "3", "2", "1", "0"):
        counted = limited.get("/v1/products", headers=headers)
        assert counted.status_code == 304
        assert counted.headers["ratelimit-remaining"] == remaining
    over = limited.get("/v1/products", headers=headers)
    assert_problem(over, 429)
    assert over.headers["ratelimit-remaining"] == "0"


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


def test_refused_credentials_throttle_further_refusals_not_valid_credentials(app_with):
    # 20 a minute scaled by 0.15 is 3 refused attempts.
    client = app_with(rate_limit_scale=0.15).test_client()
    admin = bearer()
    user = client.post(
        "/v1/users",
        json={"email": "kit@example.com", "name": "K", "password": "12345678", "role": "partner"},
        headers=admin,
    ).json()
    key = client.post(
        "/v1/api-keys",
        json={"name": "k", "scopes": ["products:read"], "owner_id": user["id"]},
        headers=admin,
    ).json()["key"]
    no_credentials = client.get("/v1/products")
    assert_problem(no_credentials, 401)  # not an attempt: it does not count
    assert_problem(client.get("/v1/products", headers={"Authorization": "Bearer guess-1"}), 401)
    assert_problem(client.get("/v1/products", headers={"X-API-Key": "shk_guess-2"}), 401)
    # A client secret refused by the token endpoint (a handler's 401, not security's) counts too.
    form = {"grant_type": "client_credentials"}
    refused_client = client.post("/v1/oauth/token", data=form, auth=("nobody", "guess-3"))
    assert refused_client.status_code == 401
    # Valid credentials from this address are served as ever: others behind the same address
    # (a NAT), or one client polling with a revoked token, hold back no valid credential.
    assert client.get("/v1/products", headers=_reader()).status_code == 200
    assert client.get("/v1/products", headers={"X-API-Key": key}).status_code == 200
    # Further refusals from it are throttled until the window ends: 429, not 401.
    for guess in ({"Authorization": "Bearer guess-4"}, {"X-API-Key": "shk_guess-5"}):
        throttled = client.get("/v1/products", headers=guess)
        body = assert_problem(throttled, 429)
        assert "failed authentication" in body["detail"]
        assert 0 < int(throttled.headers["retry-after"]) <= 60
    # The token endpoint's refusal too (its second request of three this minute).
    throttled = client.post("/v1/oauth/token", data=form, auth=("nobody", "guess-6"))
    assert_problem(throttled, 429)
    assert 0 < int(throttled.headers["retry-after"]) <= 60
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


def test_a_hit_with_a_key_read_along_counts_as_the_engines_own_hit():
    """The rate limit's hit, sent with a read of another key (a read's write mark) in one round
    trip, counts in the engine's own key: its count, window and the other key's value."""
    _redis_or_skip()
    counter = LimitCounter(REDIS_URL)
    limit = limits.parse("5/minute")
    caller = f"caller-{uuid.uuid4().hex}"
    other = f"shopapi:test-read-along:{uuid.uuid4().hex}"

    redis.Redis.from_url(REDIS_URL).set(other, 1, ex=60)

    async def exercise():
        first = await counter.hit_and_get(limit, ("an-operation", caller), other)
        second = await counter.hit_and_get(limit, ("an-operation", caller), other + "-none")
        peeked = await counter.peek_and_get(limit, ("an-operation", caller), other)
        return first, second, peeked, await counter.peek(limit, "an-operation", caller)

    first, second, peeked, engines = asyncio.run(exercise())
    assert [(usage.count, value) for usage, value in (first, second, peeked)] == [
        (1, b"1"),
        (2, None),
        (2, b"1"),
    ]
    assert engines.count == 2
    assert 0 < peeked[0].reset_after <= 60 and 0 < engines.reset_after <= 60


def _metric(base: str, name: str) -> float:
    scrape = httpx.get(f"{base}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    return sample_sum(scrape.text, name)


@contextlib.contextmanager
def _two_servers_sharing_redis(database_url: str):
    """The base URLs of two server processes on one database, counting limits in one Redis."""
    _redis_or_skip()
    settings = {"SHARED_STORE_URL": REDIS_URL, "RATE_LIMIT_SCALE": str(SCALE)}
    with (
        live_server(database_url, **settings) as first,
        live_server(database_url, **settings) as second,
    ):
        yield first, second


@pytest.mark.slow
@ONE_DATABASE
def test_two_server_processes_share_one_quota_in_redis(app, database_url):
    with _two_servers_sharing_redis(database_url) as (first, second):
        headers = _reader()
        remaining, ends = [], []
        for base in (first, second, first, second, first):
            sent = time.time()
            response = httpx.get(f"{base}/v1/products", headers=headers)
            received = time.time()
            assert response.status_code == 200
            remaining.append(response.headers["ratelimit-remaining"])
            reset = int(response.headers["ratelimit-reset"])
            assert 0 < reset <= 60
            # The window ends `reset` seconds (rounded up) after the server answered, which was
            # between sending and receiving, whatever the machine's load makes that take. The
            # second server learns the end from Redis's TTL, in whole seconds: a second more.
            ends.append((sent + reset - 2, received + reset))
        assert remaining == ["4", "3", "2", "1", "0"]
        # One window, opened by the first server: the second learns its end from Redis, so one
        # moment lies in every answer's bracket.
        assert max(earliest for earliest, _ in ends) < min(latest for _, latest in ends), ends
        for base in (second, first):
            assert_problem(httpx.get(f"{base}/v1/products", headers=headers), 429)


@pytest.mark.slow
def test_a_revalidation_on_another_server_reads_the_one_quota_in_redis(app, database_url):
    with _two_servers_sharing_redis(database_url) as (first, second):
        headers = _reader()
        listed = httpx.get(f"{first}/v1/products", headers=headers)
        current = {**headers, "If-None-Match": listed.headers["etag"]}
        revalidated = httpx.get(f"{second}/v1/products", headers=current)
        assert revalidated.status_code == 304
        assert revalidated.headers["ratelimit-remaining"] == "4"
        # The window the first server opened, as the second learns it from Redis.
        assert 0 < int(revalidated.headers["ratelimit-reset"]) <= 60
        for remaining in ("3", "2", "1", "0"):
            answer = httpx.get(f"{second}/v1/products", headers=headers)
            assert answer.headers["ratelimit-remaining"] == remaining
        assert_problem(httpx.get(f"{first}/v1/products", headers=current), 429)


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
@ONE_DATABASE
def test_without_redis_requests_are_served_and_limits_resume_when_it_returns(app, database_url):
    _redis_or_skip()
    with _redis_behind_a_proxy() as (url, proxy):
        settings = {
            "SHARED_STORE_URL": url,
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


# Whose address: forwarded headers are believed only from the proxies FORWARDED_ALLOW_IPS names.


@pytest.mark.parametrize(
    ("trusted", "peer", "forwarded_for", "client"),
    [
        ((), "127.0.0.1", "203.0.113.7", None),  # by default no proxy is trusted, loopback neither
        (("10.0.0.0/8",), "192.0.2.1", "203.0.113.7", None),  # a peer that is not a named proxy
        (("127.0.0.1",), "127.0.0.1", "203.0.113.7", "203.0.113.7"),
        (("127.0.0.1",), "127.0.0.1", "203.0.113.7:4711", "203.0.113.7"),
        (("127.0.0.1",), "127.0.0.1", "[2001:DB8:0::7]:443", "2001:db8::7"),
        (("127.0.0.1",), "127.0.0.1", "::ffff:203.0.113.7", "203.0.113.7"),
        # Each proxy appends who it heard from: what the client wrote itself is further left.
        (("127.0.0.1", "10.0.0.0/8"), "127.0.0.1", "6.6.6.6, 203.0.113.7, 10.0.0.2", "203.0.113.7"),
        # Not an address: ignored, with whatever is before it; the proxy is the client.
        (("127.0.0.1",), "127.0.0.1", "not-an-address", "127.0.0.1"),
        (("127.0.0.1",), "127.0.0.1", "203.0.113.7, unknown", "127.0.0.1"),
        (("127.0.0.1",), "127.0.0.1", "fe80::1%eth0", "127.0.0.1"),
        (("127.0.0.1",), "127.0.0.1", "", "127.0.0.1"),
        (("::1",), "::1", "203.0.113.7", "203.0.113.7"),
    ],
)
def test_the_client_address_behind_trusted_proxies(trusted, peer, forwarded_for, client):
    assert TrustedProxies(trusted).client(peer, forwarded_for) == client


GUESS = "wrong-password"


def _password_grants(base: str, forwarded_fors, usernames, password=GUESS):
    """One password grant per (X-Forwarded-For, username); the statuses, with the last answer."""
    statuses, response = [], None
    with httpx.Client(base_url=base, timeout=60) as http:
        for forwarded_for, username in zip(forwarded_fors, usernames, strict=True):
            response = http.post(
                "/v1/oauth/token",
                data={"grant_type": "password", "username": username, "password": password},
                headers={"X-Forwarded-For": forwarded_for},
            )
            statuses.append(response.status_code)
    return statuses, response


def _rotating_forwarded_fors(n: int) -> list[str]:
    """Addresses and things that are not, all different."""
    return [f"198.51.100.{i}" if i % 2 else f"spoofed-{i}" for i in range(n)]


def _strangers(n: int) -> list[str]:
    """Unknown usernames, all different: no account's limit is reached."""
    return [f"stranger-{uuid.uuid4().hex}@example.com" for _ in range(n)]


@pytest.mark.slow
@ONE_DATABASE
def test_rotating_forwarded_addresses_from_an_untrusted_peer_are_one_address(app, database_url):
    # The spec's own limits: the token endpoint takes 20 requests a minute from an address.
    with live_server(database_url, RATE_LIMIT_SCALE="1") as base:
        statuses, refused = _password_grants(base, _rotating_forwarded_fors(30), _strangers(30))
    assert statuses == [400] * 20 + [429] * 10
    assert_problem(refused, 429)


@pytest.mark.slow
@ONE_DATABASE
def test_a_trusted_proxy_makes_the_forwarded_address_count(app, database_url):
    with live_server(database_url, RATE_LIMIT_SCALE="1", FORWARDED_ALLOW_IPS="127.0.0.1") as base:
        # One client behind the proxy, however the chain before the proxy reads.
        chains = ["203.0.113.7", "6.6.6.6, 203.0.113.7", "[::ffff:203.0.113.7]:1234"] * 7
        statuses, _ = _password_grants(base, chains, _strangers(21))
        assert statuses == [400] * 20 + [429]
        # Another client behind it has its own quota.
        assert _password_grants(base, ["203.0.113.8"], _strangers(1))[0] == [400]
        # What is not an address is ignored: those requests are the proxy's own, one address.
        spoofed = [f"spoofed-{i}" for i in range(21)]
        statuses, _ = _password_grants(base, spoofed, _strangers(21))
        assert statuses == [400] * 20 + [429]


def _one_slash_64(n: int) -> list[str]:
    """`n` addresses of one IPv6 /64, as one host picks them (privacy extensions), forwarded
    in several spellings."""
    prefix = f"2001:db8:{uuid.uuid4().hex[:4]}:7"
    spellings = ["{}::{:x}", "[{}:0:0:0:{:x}]:443", "{}:0::{:x}"]
    return [spellings[i % 3].format(prefix, i + 1) for i in range(n)]


@pytest.mark.slow
@ONE_DATABASE
def test_every_address_keyed_limit_counts_an_ipv6_slash_64_as_one_address(app, database_url):
    """The token endpoint's 20 a minute per address and the refused credentials' 20 a minute
    per address: 30 addresses of one /64 get what one address gets."""
    with live_server(database_url, RATE_LIMIT_SCALE="1", FORWARDED_ALLOW_IPS="127.0.0.1") as base:
        statuses, refused = _password_grants(base, _one_slash_64(30), _strangers(30))
        assert statuses == [400] * 20 + [429] * 10
        assert "This client may call this operation 20 times" in refused.json()["detail"]
        # Another /64 has its own quota.
        assert _password_grants(base, _one_slash_64(1), _strangers(1))[0] == [400]
        with httpx.Client(base_url=base, timeout=60) as http:
            guesses = [
                http.get(
                    "/v1/products",
                    headers={"X-Forwarded-For": address, "X-API-Key": f"shk_guess-{i}"},
                )
                for i, address in enumerate(_one_slash_64(25))
            ]
        assert [r.status_code for r in guesses] == [401] * 20 + [429] * 5
        assert "failed authentication" in guesses[-1].json()["detail"]


@pytest.mark.slow
def test_wrong_passwords_for_one_account_are_limited_from_any_address(client, database_url):
    create_user(client, email="dora@example.com", password="dora-password")
    # Every request from its own address, as the trusted proxy says: no address is limited.
    addresses = [f"198.51.100.{i}" for i in range(1, 31)]
    with live_server(database_url, RATE_LIMIT_SCALE="1", FORWARDED_ALLOW_IPS="127.0.0.1") as base:
        statuses, refused = _password_grants(base, addresses[:15], ["dora@example.com"] * 15)
        # 10 wrong passwords in 15 minutes, then the account is closed to logins.
        assert statuses == [400] * 10 + [429] * 5
        body = assert_problem(refused, 429)
        assert "this account" in body["detail"]
        assert 0 < int(refused.headers["retry-after"]) <= 15 * 60
        assert refused.headers["ratelimit-policy"] == "10;w=900"
        # Even the right password, in another case, from yet another address: not checked.
        right = _password_grants(base, addresses[15:16], ["Dora@Example.com"], "dora-password")
        assert right[0] == [429]
        # Another account is not affected.
        others = _password_grants(base, addresses[16:17], ["nobody@example.com"])
        assert others[0] == [400]


@pytest.mark.slow
@ONE_DATABASE
def test_the_production_server_believes_no_forwarded_address_by_default(app, database_url):
    settings = {"RATE_LIMIT_SCALE": "1", "WEB_CONCURRENCY": "1", "FORWARDED_ALLOW_IPS": None}
    with production_server(database_url, **settings) as base:
        statuses, _ = _password_grants(base, _rotating_forwarded_fors(21), _strangers(21))
    assert statuses == [400] * 20 + [429]


# Wrong passwords, in-process: the spec's limits as they are (5 per account and address, 10 per
# account from addresses it has not logged in from, in 15 minutes), or halved (2 and 5).


@pytest.fixture
def spec_limits(app_with):
    return app_with(rate_limit_scale=1).test_client()


@pytest.fixture
def half(app_with):
    return app_with(rate_limit_scale=0.5).test_client()


def _elsewhere(client):
    """The same app from another address, with a quota of its own."""
    return client.app.test_client(client=(f"192.0.2.{next(_addresses)}", 50000))


_addresses = itertools.count(1)


def _login(client, username, password):
    form = {"grant_type": "password", "username": username, "password": password}
    return client.post("/v1/oauth/token", data=form)


def test_an_account_with_too_many_wrong_passwords_cannot_be_logged_in_to(half, client):
    create_user(client, email="erin@example.com", password="erin-password")
    for _ in range(5):
        assert _login(_elsewhere(half), "erin@example.com", GUESS).status_code == 400
    # From an address it has never logged in from, not even the right password is checked.
    refused = _login(_elsewhere(half), "ERIN@example.com", "erin-password")
    body = assert_problem(refused, 429)
    assert "this account" in body["detail"]
    assert 0 < int(refused.headers["retry-after"]) <= 15 * 60
    assert refused.headers["ratelimit-limit"] == "5"
    assert refused.headers["ratelimit-policy"] == "5;w=900"
    # An email nobody has is limited the same way: the 429 tells nothing.
    for _ in range(5):
        assert _login(_elsewhere(half), "nobody@example.com", GUESS).status_code == 400
    assert_problem(_login(_elsewhere(half), "nobody@example.com", GUESS), 429)


def test_logins_that_succeed_do_not_count(half, client):
    create_user(client, email="fred@example.com", password="fred-password")
    for _ in range(4):
        assert _login(_elsewhere(half), "fred@example.com", GUESS).status_code == 400
    for _ in range(3):
        assert _login(_elsewhere(half), "fred@example.com", "fred-password").status_code == 200
    assert _login(_elsewhere(half), "fred@example.com", GUESS).status_code == 400
    assert_problem(_login(_elsewhere(half), "fred@example.com", "fred-password"), 429)


def test_one_address_spends_only_its_share_of_an_accounts_budget(spec_limits, client):
    create_user(client, email="ida@example.com", password="ida-password")
    guesser = _elsewhere(spec_limits)
    for _ in range(5):
        assert _login(guesser, "ida@example.com", GUESS).status_code == 400
    refused = _login(guesser, "ida@example.com", GUESS)
    body = assert_problem(refused, 429)
    assert "this address" in body["detail"]
    assert 0 < int(refused.headers["retry-after"]) <= 15 * 60
    assert refused.headers["ratelimit-policy"] == "5;w=900"
    assert_problem(_login(guesser, "ida@example.com", "ida-password"), 429)  # not checked
    # The account's budget is not spent: the owner, from anywhere else, gets in.
    assert _login(_elsewhere(spec_limits), "ida@example.com", "ida-password").status_code == 200


def test_an_address_the_owner_logged_in_from_is_not_held_back_by_others(spec_limits, client):
    create_user(client, email="gail@example.com", password="gail-password")
    home = _elsewhere(spec_limits)
    assert _login(home, "gail@example.com", "gail-password").status_code == 200
    # Others spend the account's budget, from many addresses.
    for _ in range(10):
        assert _login(_elsewhere(spec_limits), "gail@example.com", GUESS).status_code == 400
    assert_problem(_login(_elsewhere(spec_limits), "gail@example.com", "gail-password"), 429)
    # The owner's own address still gets in.
    assert _login(home, "gail@example.com", "gail-password").status_code == 200
    # Its own wrong passwords are limited apart (5), and only there.
    for _ in range(5):
        assert _login(home, "gail@example.com", GUESS).status_code == 400
    assert_problem(_login(home, "gail@example.com", "gail-password"), 429)


def test_a_success_forgets_the_failures_from_its_address(spec_limits, client):
    create_user(client, email="jay@example.com", password="jay-password")
    laptop = _elsewhere(spec_limits)
    for _ in range(4):
        assert _login(laptop, "jay@example.com", GUESS).status_code == 400
    assert _login(laptop, "jay@example.com", "jay-password").status_code == 200
    # Five more typos before this address is held back, not one.
    for _ in range(5):
        assert _login(laptop, "jay@example.com", GUESS).status_code == 400
    assert_problem(_login(laptop, "jay@example.com", GUESS), 429)


def test_failures_for_an_email_nobody_has_do_not_hold_back_its_future_account(spec_limits, client):
    for _ in range(10):
        assert _login(_elsewhere(spec_limits), "hana@example.com", GUESS).status_code == 400
    assert_problem(_login(_elsewhere(spec_limits), "hana@example.com", GUESS), 429)
    create_user(client, email="hana@example.com", password="hana-password")
    assert _login(_elsewhere(spec_limits), "Hana@example.com", "hana-password").status_code == 200


# The attempt gate itself, on each store, with windows short enough to see one end.


@pytest.fixture
def event_loop_thread():
    """An event loop on a thread of its own, where the gate counts (the server's loop)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    loop.close()


def _gate(storage_uri, loop, address, windows, name="failed-login-per-account"):
    declared = [
        AttemptLimit(name, ATTEMPT_KINDS[name], limit) for limit in limits.parse_many(windows)
    ]
    return AttemptGate(LimitCounter(storage_uri), declared, "issue_token", address, loop, {})


def _guess(gate, account):
    with gate.attempt(account) as attempt:
        attempt.failed()


def _log_in(gate, account):
    with gate.attempt(account):
        pass


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_past_its_short_window_an_account_is_held_by_its_long_one(store, event_loop_thread):
    storage_uri = "memory://" if store == "memory" else REDIS_URL
    if store == "redis":
        _redis_or_skip()
    gate = _gate(storage_uri, event_loop_thread, "192.0.2.1", "2 per 2 seconds; 3 per day")
    account = f"user:{uuid.uuid4().hex}"
    _guess(gate, account)
    _guess(gate, account)
    with pytest.raises(TooManyRequests) as refused:
        _guess(gate, account)
    assert 0 < int(refused.value.headers["Retry-After"]) <= 2
    # Once the short window is over, a guess more (attempts refused meanwhile did not count)...
    deadline = time.monotonic() + 60
    while True:
        try:
            _guess(gate, account)
            break
        except TooManyRequests:
            assert time.monotonic() < deadline, "the 2-second window never ended"
            time.sleep(0.1)
    # ...and the day's limit is spent: the wait is the day's now.
    with pytest.raises(TooManyRequests) as refused:
        _log_in(gate, account)
    assert int(refused.value.headers["Retry-After"]) > 60
    assert refused.value.headers["RateLimit-Policy"] == "3;w=86400"


def test_an_address_known_to_an_account_is_known_to_every_server_sharing_redis(
    event_loop_thread,
):
    _redis_or_skip()
    account = f"user:{uuid.uuid4().hex}"
    home, elsewhere = f"2001:db8:{uuid.uuid4().hex[:4]}::1", "198.51.100.7"
    # One server sees the owner log in from home; the other sees someone else spend the
    # account's budget, then the owner again, from another address of home's /64.
    first = _gate(REDIS_URL, event_loop_thread, home, "1 per minute")
    _log_in(first, account)
    second = _gate(REDIS_URL, event_loop_thread, elsewhere, "1 per minute")
    _guess(second, account)
    with pytest.raises(TooManyRequests):
        _log_in(second, account)
    home_again = home.replace("::1", "::2")
    _log_in(_gate(REDIS_URL, event_loop_thread, home_again, "1 per minute"), account)
