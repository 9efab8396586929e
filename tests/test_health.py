"""The health probes: /healthz answers while the process lives, the database unread; /readyz
when the database answers and its migrations are current. Both public and never rate limited;
a balancer's polling neither floods the request log nor counts as the API's traffic."""

import json
import os
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
import redis
from support.helpers import assert_problem, bearer, wait_for
from support.live import live_server
from support.metrics_text import sample_sum
from support.tcp_proxy import TcpProxy

from models.db import open_database
from models.migrations import migrate

UNREACHABLE = "postgresql://postgres@127.0.0.1:1/nothing-listens-here"
METRICS_TOKEN = "metrics-token-for-tests"
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def _log_lines(captured: str) -> list[dict]:
    return [json.loads(line) for line in captured.splitlines() if line.startswith("{")]


def test_both_probes_answer_anyone_when_all_is_well(anonymous):
    alive = anonymous.get("/healthz")
    assert alive.status_code == 200
    assert alive.json() == {"status": "alive"}
    assert alive.headers["cache-control"] == "no-store"
    ready = anonymous.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready"}
    assert ready.headers["cache-control"] == "no-store"
    # The version an Accept asks for changes nothing at the root.
    versioned = {"Accept": "application/vnd.shopapi.v2+json"}
    assert anonymous.get("/readyz", headers=versioned).status_code == 200
    assert_problem(anonymous.post("/readyz"), 405)
    # They take no parameters, as the contract says.
    assert_problem(anonymous.get("/healthz?verbose=1"), 400)


def test_a_database_that_does_not_answer_is_not_ready_but_alive(app_with):
    client = app_with(database_url=UNREACHABLE).test_client()
    assert client.get("/healthz").status_code == 200
    body = assert_problem(client.get("/readyz"), 503)
    assert body["detail"] == "The database does not answer."
    # Where it is not: for the log, not for the public.
    assert "127.0.0.1" not in json.dumps(body)


def test_not_ready_until_the_database_is_migrated(app_with, tmp_path):
    url = f"sqlite:///{tmp_path}/unmigrated.db"
    client = app_with(database_url=url).test_client()
    body = assert_problem(client.get("/readyz"), 503)
    assert "migration(s) pending (m0001_initial," in body["detail"]
    assert "make migrate" in body["detail"]
    # Another process migrates: the next probe sees it.
    migrate(open_database(url))
    assert client.get("/readyz").status_code == 200


def test_probes_are_never_rate_limited(app_with):
    # A limit of 1 a minute for every operation of the API (the spec's 1000 x 0.001).
    client = app_with(rate_limit_scale=0.001).test_client()
    for _ in range(5):
        for probe in ("/healthz", "/readyz"):
            response = client.get(probe)
            assert response.status_code == 200
            assert "ratelimit-limit" not in response.headers
    assert client.get("/v1/products", headers=bearer()).status_code == 200
    assert client.get("/v1/products", headers=bearer()).status_code == 429


def test_probes_are_counted_apart_and_logged_only_when_they_fail(app_with, capsys):
    scrape = {"Authorization": f"Bearer {METRICS_TOKEN}"}
    ready = app_with(metrics_token=METRICS_TOKEN).test_client()

    def counts():
        text = ready.get("/metrics", headers=scrape).text
        return {
            "requests": sample_sum(text, "http_requests_total", operation="get_readiness")
            + sample_sum(text, "http_requests_total", operation="get_liveness"),
            "ready": sample_sum(text, "http_probes_total", operation="get_readiness", status="200"),
            "alive": sample_sum(text, "http_probes_total", operation="get_liveness", status="200"),
            "unready": sample_sum(
                text, "http_probes_total", operation="get_readiness", status="503"
            ),
        }

    before = counts()
    capsys.readouterr()
    for _ in range(3):
        assert ready.get("/healthz").status_code == 200
        assert ready.get("/readyz").status_code == 200
    assert _log_lines(capsys.readouterr().out) == []
    # Built after: the database an app is built with is every model's (and /metrics reads none).
    unready = app_with(database_url=UNREACHABLE).test_client()
    capsys.readouterr()
    assert unready.get("/readyz").status_code == 503
    logged = [line for line in _log_lines(capsys.readouterr().out) if line["message"] == "request"]
    assert [(line["path"], line["status"]) for line in logged] == [("/readyz", 503)]
    after = counts()
    assert after["requests"] == before["requests"]
    assert after["ready"] - before["ready"] == 3
    assert after["alive"] - before["alive"] == 3
    assert after["unready"] - before["unready"] == 1


@pytest.mark.slow
def test_a_host_whose_database_path_slows_leaves_rotation_until_it_is_fast_again(
    database_url, direct_database_url
):
    """Two hosts share a Redis; +200 ms on one's path to PostgreSQL (a delaying proxy) takes
    that one out of rotation, and only that one, until the delay goes."""
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite is a file: there is no path to it to slow down")
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1).ping()
    except redis.RedisError as error:
        pytest.skip(f"Redis unreachable at {REDIS_URL} ({error})")
    parts = urlsplit(direct_database_url)
    proxy = TcpProxy(parts.hostname, parts.port or 5432)
    proxy.start()
    slowed = urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{proxy.port}"))
    env = {"SHARED_STORE_URL": REDIS_URL, "METRICS_TOKEN": METRICS_TOKEN}
    try:
        with (
            live_server(slowed, **env) as slow,
            live_server(direct_database_url, **env) as fast,
            httpx.Client(timeout=30) as http,
        ):
            wait_for(
                lambda: all(http.get(f"{b}/readyz").status_code == 200 for b in (slow, fast)),
                "both hosts ready",
            )
            proxy.delay_seconds = 0.2
            out = wait_for(
                lambda: (probe := http.get(f"{slow}/readyz")).status_code == 503 and probe,
                "the slowed host out of rotation",
            )
            assert out.json()["detail"].startswith("Out of rotation: this host's database round")
            assert http.get(f"{fast}/readyz").status_code == 200
            scrape = {"Authorization": f"Bearer {METRICS_TOKEN}"}
            wait_for(  # the median of five, once a sample delayed only in part has left it
                lambda: (
                    sample_sum(
                        http.get(f"{slow}/metrics", headers=scrape).text,
                        "database_round_trip_seconds",
                    )
                    >= 0.2
                ),
                "the round trip's metric",
            )
            proxy.delay_seconds = 0
            wait_for(
                lambda: http.get(f"{slow}/readyz").status_code == 200, "the host back in rotation"
            )
    finally:
        proxy.stop()
