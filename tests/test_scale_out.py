"""Several hosts behind a real balancer: app instances in network namespaces of their own, behind
HAProxy (ops/haproxy.cfg) health-checking /readyz, sharing PostgreSQL and Redis
(shopapi/testing/hosts.py). Requests reach every host; a rolling restart under load fails none;
a host killed under load fails only what it was serving, and a client retrying its order with
its Idempotency-Key gets it created once."""

import concurrent.futures
import contextlib
import itertools
import os
import signal
import threading
import time
import uuid

import httpx
import psycopg2
import pytest
import redis
from support.helpers import (
    JWT_SECRET,
    RATE_LIMIT_SCALE,
    WAITS_UNBOUNDED,
    bearer,
    locked,
    wait_for,
)

from shopapi.testing.hosts import Hosts, balancer_stats, unavailable_reason

pytestmark = pytest.mark.slow

REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
HOSTS = 3
LOAD_THREADS = 4
# The balancer asks every 0.3 s and takes a host out after 2 failures: well within the drain.
CHECK_INTERVAL, DRAIN_SECONDS = "300ms", 2
LEASE_SECONDS = 2
STOCK = 1_000_000
# What a host (one worker) executes at once, and the balancer sends it: the orders parked on a
# locked row hold their places throughout, the load's lists take the others. With the default
# 2, two parked orders filled a host, its lists waited in line and were refused 503 once the
# wait ran out.
HOST_CONCURRENCY = 5


def _unavailable() -> str | None:
    reason = unavailable_reason()
    if reason is None:
        try:
            redis.Redis.from_url(REDIS_URL, socket_timeout=3).ping()
        except redis.RedisError as error:
            reason = f"Redis unreachable at {REDIS_URL} ({error})"
    return reason


@pytest.fixture(scope="module")
def topology(database_url, tmp_path_factory):
    """One set of hosts for this module's tests (it takes seconds to start)."""
    if not database_url.startswith("postgresql"):
        pytest.skip("hosts share one database: SQLite is a file on one machine")
    reason = _unavailable()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI must run the scale-out test")
        pytest.skip(reason)
    env = {
        "JWT_SECRET": JWT_SECRET,
        "HMAC_SECRET": "scale-out-cursor-secret-shared-by-all-hosts",
        "RATE_LIMIT_SCALE": str(RATE_LIMIT_SCALE),
        "DRAIN_SECONDS": str(DRAIN_SECONDS),
        "IDEMPOTENCY_LEASE_SECONDS": str(LEASE_SECONDS),
        "DATABASE_POOL_SIZE": "6",
        **WAITS_UNBOUNDED,  # orders are parked on a locked row while a host is killed
        "ADMISSION_CONCURRENCY": str(HOST_CONCURRENCY),
    }
    work_dir = tmp_path_factory.mktemp("hosts")
    with Hosts(
        HOSTS, database_url, REDIS_URL, env, work_dir, check_interval=CHECK_INTERVAL
    ) as made:
        yield made


@pytest.fixture
def hosts(topology):
    """The hosts, every one serving (a test before may have killed one)."""
    for name, server in topology.processes.items():
        if name in topology.names and server.poll() is not None:
            topology.start(name)
            topology.wait_until_ready(name)
            topology.wait_for_state(name, "UP")
    return topology


@pytest.fixture
def api(hosts):
    with httpx.Client(base_url=hosts.base, headers=bearer(), timeout=60) as client:
        yield client


def _customer_and_product(api) -> tuple[int, int]:
    sku = f"SCALE-{uuid.uuid4().hex[:8].upper()}"
    product = api.post("/v1/products", json={"sku": sku, "name": "Cup", "price_cents": 100})
    assert product.status_code == 201, product.text
    product_id = product.json()["id"]
    assert api.patch(f"/v1/products/{product_id}", json={"stock": STOCK}).status_code == 200
    user = api.post(
        "/v1/users",
        json={"email": f"{sku.lower()}@example.com", "name": "Ada", "password": "correct horse"},
    )
    assert user.status_code == 201, user.text
    return user.json()["id"], product_id


def _order(api, key: str, user_id: int, product_id: int) -> httpx.Response:
    return api.post(
        "/v1/orders",
        json={"user_id": user_id, "items": [{"product_id": product_id, "quantity": 1}]},
        headers={"Idempotency-Key": key},
    )


class Load:
    """Clients sending requests through the balancer, one at a time each, until stopped: lists
    of products, and (given a customer and a product) an order in ten, each with its own key.
    `results` holds (started, finished, what, status or the transport error's name)."""

    def __init__(self, base: str, order: tuple[int, int] | None = None):
        self.base, self.order = base, order
        self.results: list[tuple[float, float, str, int | str]] = []
        self.resent: list[float] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._client, args=(n,)) for n in range(LOAD_THREADS)
        ]

    def __enter__(self) -> "Load":
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _client(self, n: int) -> None:
        with httpx.Client(base_url=self.base, headers=bearer(), timeout=60) as api:
            for i in itertools.count():
                if self._stop.is_set():
                    return
                started = time.monotonic()
                what = "order" if self.order and (i + n) % 10 == 0 else "list"
                try:
                    if what == "order":
                        status = _order(api, str(uuid.uuid4()), *self.order).status_code
                    else:
                        status = self._list(api, started)
                except httpx.TransportError as error:
                    status = f"{type(error).__name__}: {error}"
                self.results.append((started, time.monotonic(), what, status))

    def _list(self, api: httpx.Client, started: float) -> int:
        # A kept-alive connection the balancer closed just as this request went out ends with
        # no answer: a GET is sent once more, as RFC 9112 (9.3.1) allows and browsers do. Noted
        # in `resent`; an order is never sent twice.
        try:
            return api.get("/v1/products?per_page=5").status_code
        except httpx.RemoteProtocolError:
            self.resent.append(started)
            return api.get("/v1/products?per_page=5").status_code

    @property
    def failures(self) -> list:
        expected = {"list": 200, "order": 201}
        return [result for result in self.results if result[3] != expected[result[2]]]

    def wait_for_more(self, count: int) -> None:
        """Until `count` more requests than now have been answered."""
        target = len(self.results) + count
        wait_for(lambda: len(self.results) >= target, f"{count} more requests")


def _served_by(hosts, request_ids: set[str]) -> dict[str, set[str]]:
    """Which host logged each of `request_ids`."""
    served = {}
    for name in hosts.names:
        log = hosts.log(name).read_text()
        served[name] = {rid for rid in request_ids if f'"request_id":"{rid}"' in log}
    return served


def test_requests_through_the_balancer_reach_every_host(hosts, api):
    request_ids = {f"reach-{uuid.uuid4().hex}" for _ in range(5 * HOSTS)}
    for request_id in request_ids:
        response = api.get("/v1/products", headers={"X-Request-ID": request_id})
        assert response.status_code == 200
    # A host logs a request once it has answered it: its line may come just after.
    served = wait_for(
        lambda: (
            (by := _served_by(hosts, request_ids))
            and sum(map(len, by.values())) >= len(request_ids)
            and by
        ),
        "every request's log line",
    )
    assert all(served[name] for name in hosts.names), served
    # Each request served once, by one host.
    assert sorted(rid for ids in served.values() for rid in ids) == sorted(request_ids)
    # The balancer sends a host as many as its one worker runs at once (not HAProxy's 4 for
    # production's two workers).
    limits = {row["svname"]: row["slim"] for row in balancer_stats(hosts.socket_path)}
    assert [limits[name] for name in hosts.names] == [str(HOST_CONCURRENCY)] * HOSTS, limits


def test_a_rolling_restart_under_load_fails_no_request(hosts, api):
    with Load(hosts.base, _customer_and_product(api)) as load:
        load.wait_for_more(20)
        for name in hosts.names:
            server = hosts.processes[name]
            server.send_signal(signal.SIGTERM)
            # The balancer takes the host out on its /readyz 503, while the host still serves.
            hosts.wait_for_state(name, "DOWN")
            assert server.poll() is None
            server.wait(timeout=120)
            hosts.start(name)
            hosts.wait_until_ready(name)
            hosts.wait_for_state(name, "UP")
            load.wait_for_more(10)
    assert load.failures == []
    assert load.resent == []
    assert {what for _, _, what, _ in load.results} == {"list", "order"}


def _orders_waiting(database_url: str) -> dict[str, int]:
    """How many orders wait on the locked row, by host (PGAPPNAME): at the row, or, the
    customer's later ones, before it at the customer's order counter (held by the first)."""
    with contextlib.closing(psycopg2.connect(database_url)) as connection:
        cursor = connection.cursor()
        cursor.execute(
            "SELECT application_name, count(*) FROM pg_stat_activity "
            "WHERE wait_event_type = 'Lock' AND (query LIKE 'UPDATE \"product\"%%' "
            "OR query LIKE 'INSERT INTO \"order\"%%') GROUP BY 1"
        )
        return dict(cursor.fetchall())


def _placed(database_url: str, product_id: int) -> tuple[int, int]:
    """The orders of this product, and its stock."""
    with contextlib.closing(psycopg2.connect(database_url)) as connection:
        cursor = connection.cursor()
        cursor.execute("SELECT count(*) FROM order_item WHERE product_id = %s", (product_id,))
        (orders,) = cursor.fetchone()
        cursor.execute("SELECT stock FROM product WHERE id = %s", (product_id,))
        return orders, cursor.fetchone()[0]


def _outcome(answer: concurrent.futures.Future) -> int | str:
    """The status an order was answered with, or the transport error that ended it."""
    try:
        return answer.result().status_code
    except httpx.TransportError as error:
        return type(error).__name__


def test_a_killed_host_fails_only_what_it_was_serving(hosts, api, database_url):
    user_id, product_id = _customer_and_product(api)
    held: dict[str, concurrent.futures.Future] = {}
    with (
        concurrent.futures.ThreadPoolExecutor(2 * HOSTS) as pool,
        Load(hosts.base) as load,
    ):
        with locked(database_url, "SELECT 1 FROM product WHERE id = %s FOR UPDATE", (product_id,)):
            # Orders parked on the locked row, until two hosts have some: one will die.
            while len(_orders_waiting(database_url)) < 2:
                assert len(held) < 2 * HOSTS, _orders_waiting(database_url)
                key = str(uuid.uuid4())
                held[key] = pool.submit(_order, api, key, user_id, product_id)
                wait_for(
                    lambda: sum(_orders_waiting(database_url).values()) == len(held),
                    "every order sent to wait on the locked row",
                )
            parked, on_victim = next(iter(_orders_waiting(database_url).items()))
            victim = parked.removeprefix("shopapi-")
            hosts.kill(victim)
            killed_at = time.monotonic()
            hosts.wait_for_state(victim, "DOWN")
            load.wait_for_more(20)
        answers = {key: _outcome(future) for key, future in held.items()}
    # Of the background load, only requests the victim had taken (in flight, or accepted by
    # its kernel) before it was gone failed.
    assert len(load.failures) + len(load.resent) <= LOAD_THREADS, (load.failures, load.resent)
    assert all(started < killed_at for started, _, _, _ in load.failures), (
        killed_at,
        load.failures,
    )
    # Of the orders, exactly those it was serving: a 502 from the balancer, or their
    # connection closed.
    failed = [key for key, answer in answers.items() if answer != 201]
    assert len(failed) == on_victim, answers
    # Their client retries with the same key: refused while the dead host's claim holds
    # (IDEMPOTENCY_LEASE_SECONDS), then placed, once.
    for key in failed:
        while (retry := _order(api, key, user_id, product_id)).status_code == 409:
            time.sleep(int(retry.headers["retry-after"]))
        assert retry.status_code == 201, retry.text
        again = _order(api, key, user_id, product_id)
        assert again.headers["idempotent-replayed"] == "true"
        assert again.json()["id"] == retry.json()["id"]
    assert _placed(database_url, product_id) == (len(held), STOCK - len(held))
