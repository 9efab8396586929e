"""A busy server refuses at once what it cannot answer promptly: with ADMISSION_CONCURRENCY
requests executing and ADMISSION_QUEUE waiting, one more is a 503 problem with Retry-After,
which costs its caller no rate limit and is counted; the health probes and /metrics always
answer; a waiter is served in its turn, or refused when it has waited ADMISSION_MAX_WAIT_MS, or
only ADMISSION_STANDING_WAIT_MS once the line has refused someone (the server is overloaded)."""

import asyncio
import concurrent.futures
import contextlib
import os
import pathlib
import shutil
import sqlite3
import subprocess
import time

import httpx
import pytest
from support.helpers import assert_problem, bearer, locked, wait_for
from support.live import live_server
from support.metrics_text import sample_sum

from shopapi.pipeline.admission import Admission
from shopapi.testing.hosts import balancer_config, balancer_stats
from shopapi.testing.ports import free_port

pytestmark = pytest.mark.slow

# One request executes at a time; the database's own bounds lifted, so that a request held by a
# lock of the test's waits until the test lets it go.
ONE_AT_A_TIME = {
    "ADMISSION_CONCURRENCY": "1",
    "DATABASE_LOCK_TIMEOUT_SECONDS": "0",
    "DATABASE_STATEMENT_TIMEOUT_SECONDS": "0",
}
PRODUCT = {"sku": "HELD-1", "name": "Held", "price_cents": 100, "stock": 1}


@contextlib.contextmanager
def writes_held(database_url: str):
    """Every write to the product table waits until the block ends (SQLite: any write, for at
    most its busy timeout, 10 s); reads go on."""
    if database_url.startswith("postgresql"):
        with locked(database_url, "LOCK TABLE product IN EXCLUSIVE MODE"):
            yield
        return
    connection = sqlite3.connect(database_url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        connection.execute("BEGIN IMMEDIATE")
        yield
    finally:
        connection.rollback()
        connection.close()


def in_flight(http: httpx.Client) -> float:
    """Requests the server is handling, this scrape included."""
    return sample_sum(http.get("/metrics").text, "http_requests_in_flight")


@contextlib.contextmanager
def one_request_executing(http: httpx.Client, database_url: str, product: dict = PRODUCT):
    """A product's creation executing (waiting on the database) until the block ends; then its
    answer must be a 201."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        with writes_held(database_url):
            held = pool.submit(http.post, "/v1/products", json=product)
            wait_for(lambda: in_flight(http) >= 2, "the creation to be executing")
            yield
        assert held.result().status_code == 201, held.result().text


def test_one_more_than_it_runs_and_queues_is_refused_at_once(app, database_url):
    with (
        live_server(database_url, ADMISSION_QUEUE="0", **ONE_AT_A_TIME) as base,
        httpx.Client(base_url=base, timeout=60, headers=bearer()) as http,
    ):
        remaining = int(http.get("/v1/products").headers["ratelimit-remaining"])
        with one_request_executing(http, database_url):
            started = time.monotonic()
            refused = http.get("/v1/products")
            waited = time.monotonic() - started
            problem = assert_problem(refused, 503)
            assert "busy" in problem["detail"]
            assert refused.headers["retry-after"] == "1"
            assert refused.headers["api-version"]
            assert waited < 30, waited  # at once: not after the held request
            # A body is refused too; the connection still serves the next request.
            body = http.post("/v1/products", json={**PRODUCT, "sku": "HELD-2"})
            assert_problem(body, 503)
            # What a balancer and Prometheus poll always answers.
            assert http.get("/healthz").status_code == 200
            assert http.get("/readyz").status_code == 200
            metrics = http.get("/metrics")
            assert metrics.status_code == 200
        shed = sample_sum(metrics.text, "http_requests_shed_total", operation="list_products")
        assert shed == 1
        assert sample_sum(metrics.text, "http_requests_shed_total", operation="create_product") == 1
        # The refused list cost its caller nothing of its rate limit.
        again = http.get("/v1/products")
        assert again.status_code == 200
        assert int(again.headers["ratelimit-remaining"]) == remaining - 1
        assert [p["sku"] for p in again.json()["data"]] == ["HELD-1"]


def test_a_waiter_is_refused_when_it_has_waited_too_long(app, database_url):
    with (
        live_server(
            database_url, ADMISSION_QUEUE="1", ADMISSION_MAX_WAIT_MS="300", **ONE_AT_A_TIME
        ) as base,
        httpx.Client(base_url=base, timeout=60, headers=bearer()) as http,
        one_request_executing(http, database_url),
    ):
        started = time.monotonic()
        refused = http.get("/v1/products")
        assert time.monotonic() - started >= 0.3
        assert_problem(refused, 503)
        assert refused.headers["retry-after"] == "1"


def test_a_waiter_is_served_in_its_turn_one_more_is_refused_and_then_waits_are_short(
    app, database_url
):
    """A waiter of a burst waits as long as it takes (up to 600 s here, past the client's
    timeout); once the full line has refused someone it is standing, and the next waiter waits
    only the standing wait."""
    with (
        live_server(
            database_url,
            ADMISSION_QUEUE="1",
            ADMISSION_MAX_WAIT_MS="600000",
            ADMISSION_STANDING_WAIT_MS="50",
            **ONE_AT_A_TIME,
        ) as base,
        httpx.Client(base_url=base, timeout=60, headers=bearer()) as http,
        concurrent.futures.ThreadPoolExecutor(1) as pool,
    ):
        with one_request_executing(http, database_url):
            waiting = pool.submit(http.get, "/v1/products")
            wait_for(lambda: in_flight(http) >= 3, "a list to wait in line")
            assert_problem(http.get("/v1/products"), 503)  # the line is full
            assert not waiting.done()
        assert waiting.result().status_code == 200  # it had the burst's wait
        with one_request_executing(http, database_url, {**PRODUCT, "sku": "HELD-2"}):
            refused = http.get("/v1/products")  # the line is empty, but standing
            assert_problem(refused, 503)
            assert refused.headers["retry-after"] == "1"


def test_places_go_first_come_first_served():
    """The gate's line alone, on one event loop: the waiters enter in the order they came."""

    async def scenario() -> list[int]:
        admission = Admission(limit=1, queue=3, max_wait=600)
        entered: list[int] = []
        assert await admission.enter()

        async def request(number: int) -> None:
            assert await admission.enter()
            entered.append(number)
            await asyncio.sleep(0)
            admission.leave()

        waiters = []
        for number in range(3):
            waiters.append(asyncio.create_task(request(number)))
            await asyncio.sleep(0)  # it is in line before the next comes
        assert not await admission.enter()  # the line is full: refused at once
        admission.leave()
        await asyncio.gather(*waiters)
        assert admission.executing == 0
        return entered

    assert asyncio.run(scenario()) == [0, 1, 2]


def test_a_waiter_given_up_on_as_a_place_frees_leaves_the_line_whole():
    """A waiter cancelled (its deadline, or the server stopping) just before a place frees: the
    place goes to no one who is gone, and the waiter's own end does not fail."""

    async def scenario() -> tuple[int, int]:
        admission = Admission(limit=1, queue=1, max_wait=600)
        assert await admission.enter()
        waiter = asyncio.create_task(admission.enter())
        await asyncio.sleep(0)  # in line
        waiter.cancel()  # its turn is cancelled now; the task learns it later
        admission.leave()  # drops the cancelled turn, frees the place
        with pytest.raises(asyncio.CancelledError):
            await waiter
        return admission.executing, len(admission.waiting)

    assert asyncio.run(scenario()) == (0, 0)


def test_after_a_refusal_a_newcomer_waits_only_the_standing_wait():
    """The gate alone: before any refusal a waiter waits as long as it takes; once the full line
    has refused someone, a newcomer in an empty line is refused after the standing wait."""

    async def scenario() -> tuple[bool, bool]:
        admission = Admission(limit=1, queue=1, max_wait=600, standing_wait=0.01)
        assert await admission.enter()
        first = asyncio.create_task(admission.enter())
        await asyncio.sleep(0)  # in line, with the burst's wait
        refused_when_full = not await admission.enter()
        admission.leave()  # the first in line takes the place
        assert await first
        newcomer = await asyncio.wait_for(admission.enter(), 60)
        return refused_when_full, newcomer

    assert asyncio.run(scenario()) == (True, False)


@contextlib.contextmanager
def balancer(host: str, work_dir: pathlib.Path, **settings: str):
    """ops/haproxy.cfg in front of the one host `host`, as an operator runs it, with its
    `settings`; its base URL and its runtime API's socket, once it sees the host up."""
    if shutil.which("haproxy") is None:
        if os.environ.get("CI"):
            pytest.fail("haproxy is not installed (Debian's haproxy); CI must test the balancer")
        pytest.skip("haproxy is not installed (Debian's haproxy)")
    config = work_dir / "haproxy.cfg"
    config.write_text(balancer_config({"app1": host.removeprefix("http://")}))
    port, stats = free_port(), work_dir / "haproxy.sock"
    env = {
        **os.environ,
        **settings,
        "BALANCER_BIND": f"127.0.0.1:{port}",
        "HAPROXY_STATS_SOCKET": str(stats),
    }
    with (work_dir / "haproxy.log").open("wb") as log:
        process = subprocess.Popen(
            ["haproxy", "-db", "-f", str(config)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: backend_stat(stats, "status") == "UP", "the balancer to see the host up")
        yield f"http://127.0.0.1:{port}", stats
    finally:
        process.terminate()
        process.wait(60)


def backend_stat(stats: pathlib.Path, column: str) -> str | None:
    """A column of the balancer's `show stat` for the backend as a whole (None before it
    answers)."""
    rows = balancer_stats(stats)
    return next((row[column] for row in rows if row["svname"] == "BACKEND"), None)


def test_the_balancers_line_is_as_long_as_the_hosts_and_one_more_is_refused_at_once(
    app, database_url, tmp_path
):
    """ops/haproxy.cfg sends a host no more than it runs (HOST_MAXCONN) and keeps a line of
    HOST_QUEUE a host; one more is a 503 problem at once, not after QUEUE_TIMEOUT (600 s here,
    past the client's timeout)."""
    if not database_url.startswith("postgresql"):
        pytest.skip("the balancer is the same on either database; PostgreSQL holds the write")
    line = {"HOST_MAXCONN": "1", "HOST_QUEUE": "1", "QUEUE_TIMEOUT": "600s"}
    with (
        live_server(database_url, **ONE_AT_A_TIME) as host,
        balancer(host, tmp_path, **line) as (base, stats),
        httpx.Client(base_url=host, timeout=60, headers=bearer()) as direct,
        httpx.Client(base_url=base, timeout=60, headers=bearer()) as http,
        concurrent.futures.ThreadPoolExecutor(2) as pool,
    ):
        with writes_held(database_url):
            held = pool.submit(http.post, "/v1/products", json=PRODUCT)
            wait_for(lambda: in_flight(direct) >= 2, "the creation to be executing")
            waiting = pool.submit(http.get, "/v1/products")
            wait_for(lambda: backend_stat(stats, "qcur") == "1", "a list in the balancer's line")
            refused = http.get("/v1/products")
            # The balancer's own problem: no host saw it, so it has no request id.
            assert refused.status_code == 503
            assert refused.headers["content-type"] == "application/problem+json"
            assert refused.json()["status"] == 503
            assert refused.headers["retry-after"] == "1"
            assert not waiting.done()
        assert held.result().status_code == 201
        assert waiting.result().status_code == 200
