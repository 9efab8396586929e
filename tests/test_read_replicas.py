"""Reads on a real hot standby (shopapi/testing/standby.py), as a client of two servers sharing
Redis sees them, one connected directly and one through PgBouncer: reads land on the replica, a
caller reads its own writes, a stale, lagging or stopped replica is skipped, and nothing written
is lost."""

import contextlib
import os
import uuid

import httpx
import pytest
import redis
from support.event_stream import stream
from support.helpers import bearer
from support.live import live_servers
from support.metrics_text import sample_sum
from support.standby_stream import cut_from_its_primary

import models
from models.db import close_connection, database, open_database, use
from models.migrations import migrate
from models.routing import Route, current_route
from shopapi.testing.pgbouncer import PgBouncer, PgBouncerUnavailable
from shopapi.testing.standby import primary_and_standby, wait_for

pytestmark = pytest.mark.slow

REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
MAX_LAG_SECONDS = 6
PRODUCT_SCANS = "SELECT coalesce(sum(seq_scan + coalesce(idx_scan, 0)), 0) FROM pg_stat_user_tables"


@pytest.fixture(scope="module")
def replication():
    with primary_and_standby() as replication:
        primary = open_database(replication.primary.url)
        migrate(primary)
        primary.close_all()
        yield replication


@pytest.fixture(scope="module")
def bouncer(replication):
    """A PgBouncer in front of both, as on a production host: the standby an entry of its own."""
    try:
        bouncer = PgBouncer(replication.primary.url, aliases={"replica": replication.standby.url})
    except PgBouncerUnavailable as error:
        if os.environ.get("CI"):
            pytest.fail(f"{error}; CI must test replicas through PgBouncer", pytrace=False)
        pytest.skip(str(error))
    yield bouncer
    bouncer.stop()


@pytest.fixture(scope="module")
def hosts(replication, bouncer):
    """Two servers (two hosts, as far as the marks of writes go), each reading from the standby:
    the first connects to both directly, the second through PgBouncer, where the replica checks
    must run too (it refuses a statement timeout given at connect time)."""
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1).ping()
    except redis.RedisError as error:
        if os.environ.get("CI"):
            pytest.fail(f"Redis unreachable at {REDIS_URL} ({error}); CI must test replicas")
        pytest.skip(f"Redis unreachable at {REDIS_URL} ({error})")
    settings = {
        "DATABASE_REPLICA_MAX_LAG_SECONDS": str(MAX_LAG_SECONDS),
        "SHARED_STORE_URL": REDIS_URL,
        "METRICS_TOKEN": "metrics-token-for-replica-tests",
        # Shared by every host, as in production: it keys Idempotency-Key fingerprints.
        "HMAC_SECRET": "cursor-secret-shared-by-the-replica-tests-hosts",
    }
    primary, standby = replication.primary.url, replication.standby.url
    with contextlib.ExitStack() as servers:
        first, second = (
            servers.enter_context(
                live_servers(1, database, DATABASE_REPLICA_URLS=replica, **settings)
            )[0]
            for database, replica in (
                (primary, standby),
                (bouncer.url(primary), bouncer.alias_url("replica")),
            )
        )
        for base in (first, second):  # each has found the standby (its checks start with it)
            with client(base) as reader:
                wait_until_reads_land_on(replication.standby, reader)
        yield first, second


@pytest.fixture
def replayed(replication):
    """The standby up and replaying at the start of a test, and at its end every row that the
    test wrote on both servers: nothing is lost."""
    standby = replication.standby
    if not standby.is_running():
        standby.start()
    standby.query("SELECT pg_wal_replay_resume()")
    yield replication
    if not standby.is_running():
        standby.start()
    standby.query("SELECT pg_wal_replay_resume()")
    wait_for(replication.replayed_everything, what="the standby replays everything")
    skus = "SELECT sku FROM product ORDER BY sku"
    assert replication.primary.query(skus) == standby.query(skus)


def client(base: str) -> httpx.Client:
    """A client of its own: a caller with a subject no other test uses."""
    headers = bearer(f"client:{uuid.uuid4().hex}")
    return httpx.Client(base_url=base, headers=headers, timeout=60)


def create_product(http: httpx.Client) -> dict:
    body = {"sku": f"R-{uuid.uuid4().hex[:12].upper()}", "name": "Replicated", "price_cents": 100}
    response = http.post("/v1/products", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def status_of(http: httpx.Client, product: dict) -> int:
    return http.get(f"/v1/products/{product['id']}").status_code


def scans_on(server) -> int:
    return int(server.query(PRODUCT_SCANS)[0][0])


def wait_until_reads_land_on(standby, reader: httpx.Client) -> None:
    """Until `reader`'s reads show in the standby's own statistics (flushed within ~1 s)."""
    scans = scans_on(standby)
    wait_for(
        lambda: reader.get("/v1/products").status_code == 200 and scans_on(standby) > scans,
        what="the standby counts the reader's scans",
    )


def reads_counted(base: str, **labels) -> float:
    scrape = httpx.get(
        f"{base}/metrics", headers={"Authorization": "Bearer metrics-token-for-replica-tests"}
    )
    return sample_sum(scrape.text, "database_read_requests_total", **labels)


def test_reads_land_on_the_replica(hosts, replayed):
    first, second = hosts
    standby = replayed.standby
    with client(first) as writer, client(second) as reader:
        wait_until_reads_land_on(standby, reader)
        standby.query("SELECT pg_wal_replay_pause()")
        product = create_product(writer)
        # Replay paused: the standby does not have it, and the reader is shown the standby's.
        assert status_of(reader, product) == 404
        assert product["sku"] not in reader.get("/v1/products", params={"limit": 100}).text
        standby.query("SELECT pg_wal_replay_resume()")
        wait_for(lambda: status_of(reader, product) == 200, what="the reader sees the replayed row")


def test_a_writer_reads_its_own_writes_on_every_host_while_others_read_the_replica(hosts, replayed):
    first, second = hosts
    standby = replayed.standby
    with (
        client(first) as writer,
        client(second) as other,
        # The same caller, on the other host.
        httpx.Client(base_url=second, headers=writer.headers, timeout=60) as writer_elsewhere,
    ):
        own_writes = reads_counted(second, database="primary", reason="own_writes")
        standby.query("SELECT pg_wal_replay_pause()")
        product = create_product(writer)
        # Another caller is served by the standby, which is behind, but within the bound.
        assert status_of(other, product) == 404
        # The writer reads its write at once, on either host: the primary answers until the
        # standby has replayed it.
        assert status_of(writer, product) == 200
        assert status_of(writer_elsewhere, product) == 200
        assert reads_counted(second, database="primary", reason="own_writes") > own_writes
        # Replay still paused: once the standby lags past the bound, it is skipped for everyone.
        wait_for(
            lambda: status_of(other, product) == 200,
            deadline_seconds=MAX_LAG_SECONDS + 60,
            what="a replica lagging past the bound is skipped",
        )
        assert reads_counted(second, database="primary", reason="no_replica") > 0


def test_a_stopped_replica_sends_reads_to_the_primary_and_its_return_brings_them_back(
    hosts, replayed
):
    first, second = hosts
    standby = replayed.standby
    with client(first) as writer, client(second) as reader:
        for _ in range(4):  # pooled connections to the standby, which the stop breaks
            assert reader.get("/v1/products").status_code == 200
        product = create_product(writer)
        wait_for(lambda: status_of(reader, product) == 200, what="the reader sees the row")
        standby.stop()
        # No error: a read whose replica fails is answered by the primary, and the replica is
        # then skipped until it answers again.
        for _ in range(10):
            assert reader.get("/v1/products").status_code == 200
            assert status_of(reader, product) == 200
        served_by_primary = reads_counted(second, database="primary")
        later = create_product(writer)
        assert status_of(reader, later) == 200
        assert status_of(writer, later) == 200
        assert reads_counted(second, database="primary") >= served_by_primary + 1
        standby.start()
        wait_until_reads_land_on(standby, reader)


def test_a_request_sent_to_a_replica_that_writes_moves_to_the_primary(replayed):
    """No GET writes today, so no client can show this: the routing itself is tested, on the
    real databases, as a read-routed request's handler would use it."""
    primary = open_database(replayed.primary.url)
    standby = open_database(replayed.standby.url)
    bound, route = database.obj, Route(standby)
    use(primary)
    token = current_route.set(route)
    try:
        assert models.Product.select().count() >= 0
        assert route.replica is standby  # reads stay on the replica
        product = models.Product.create(
            sku=f"W-{uuid.uuid4().hex[:12].upper()}", name="w", price_cents=1
        )
        assert route.replica is None and route.wrote
        # From the write on, the request reads from the primary: its own write included.
        assert models.Product.get_by_id(product.id).sku == product.sku
    finally:
        close_connection()
        current_route.reset(token)
        use(bound)
        primary.close_all()
        standby.close_all()


def test_a_failing_replica_is_answered_by_the_primary(replayed):
    primary = open_database(replayed.primary.url)
    gone = open_database(replayed.standby.url.replace(f":{replayed.standby.port}/", ":1/"))
    bound, route = database.obj, Route(gone)
    use(primary)
    token = current_route.set(route)
    try:
        assert (
            models.Product.select().count()
            == primary.execute_sql("SELECT count(*) FROM product").fetchone()[0]
        )
        assert route.replica is None and route.failure[0] is gone
    finally:
        close_connection()
        current_route.reset(token)
        use(bound)
        primary.close_all()


def test_readiness_is_the_primarys_whatever_the_replica_does(hosts, replayed):
    """/readyz says whether this host can serve writes: a host that has lost the primary leaves
    the balancer even while its replica answers; a lost replica only moves reads."""
    replayed.standby.stop()
    for base in hosts:
        assert httpx.get(f"{base}/readyz", timeout=60).status_code == 200
    replayed.standby.start()
    replayed.primary.stop()
    try:
        for base in hosts:
            wait_for(
                lambda: httpx.get(f"{base}/readyz", timeout=60).status_code == 503,  # noqa: B023
                what="the host without its primary is not ready",
            )
    finally:
        replayed.primary.start()
    for base in hosts:
        wait_for(
            lambda: httpx.get(f"{base}/readyz", timeout=60).status_code == 200,  # noqa: B023
            what="the host is ready again with its primary",
        )


def test_a_replayed_answer_sends_its_callers_next_reads_where_the_write_is(hosts, replayed):
    """A write's answer replayed for its Idempotency-Key (the first host may have died before it
    noted the write for its caller) notes it as the write did: the caller's next read does not
    go to a replica that lacks it."""
    first, second = hosts
    subject = f"client:{uuid.uuid4().hex}"
    body = {"sku": f"R-{uuid.uuid4().hex[:12].upper()}", "name": "Replayed", "price_cents": 100}
    key = {"Idempotency-Key": uuid.uuid4().hex}
    with httpx.Client(base_url=first, headers=bearer(subject), timeout=60) as writer:
        replayed.standby.query("SELECT pg_wal_replay_pause()")
        created = writer.post("/v1/products", json=body, headers=key)
        assert created.status_code == 201, created.text
    # As if the first host had died before noting the write: no mark for the caller.
    redis.Redis.from_url(REDIS_URL).delete(f"shopapi:written-at:sub:{subject}")
    with httpx.Client(base_url=second, headers=bearer(subject), timeout=60) as retry:
        again = retry.post("/v1/products", json=body, headers=key)
        assert again.headers.get("idempotent-replayed") == "true", (again.status_code, again.text)
        assert retry.get(f"/v1/products/{created.json()['id']}").status_code == 200


def test_an_event_stream_is_no_routed_read_and_hears_of_writes_at_once(hosts, replayed):
    """A stream reads through its poller, on the primary: read routing lets it pass, counting no
    read and looking up no mark, and a write reaches it though the standby has not replayed it."""
    first, _ = hosts
    scrapes = []  # each a read counted, once it is answered

    def scraped(name: str) -> float:
        scrapes.append(name)
        scrape = httpx.get(
            f"{first}/metrics",
            headers={"Authorization": "Bearer metrics-token-for-replica-tests"},
        )
        return sample_sum(scrape.text, name)

    with client(first) as writer:
        counted = scraped("database_read_requests_total")
        replayed.standby.query("SELECT pg_wal_replay_pause()")
        with stream(first, bearer()) as events:
            product = create_product(writer)
            created = events.events(1)[0]
        assert created["data"]["data"]["id"] == product["id"]
        # A stream is counted (or not) when the server has seen it end.
        wait_for(lambda: scraped("event_streams_open") == 0, what="the server sees the stream end")
        before_this_scrape = len(scrapes)
        assert scraped("database_read_requests_total") == counted + before_this_scrape


def replica_metric(base: str, name: str) -> float:
    scrape = httpx.get(
        f"{base}/metrics", headers={"Authorization": "Bearer metrics-token-for-replica-tests"}
    )
    return sample_sum(scrape.text, name)


def test_a_replica_that_receives_no_wal_shows_in_the_metrics_until_it_streams_again(
    hosts, replayed
):
    """The standby cut from its primary's WAL (its primary_conninfo pointed nowhere, as when the
    primary removed the WAL it needs): it still answers, and both hosts' metrics say it streams
    nothing and falls behind; streaming again, it catches up."""
    first, second = hosts
    standby = replayed.standby

    def metrics_say(streaming: float, lagging) -> bool:
        return all(
            replica_metric(base, "database_replica_up") == 1
            and replica_metric(base, "database_replica_streaming") == streaming
            and lagging(replica_metric(base, "database_replica_lag_seconds"))
            for base in (first, second)
        )

    wait_for(lambda: metrics_say(1, lambda lag: lag < 1), what="the standby streams")
    with cut_from_its_primary(standby):
        wait_for(lambda: metrics_say(0, lambda lag: True), what="the standby seen not streaming")
        with client(first) as writer:
            create_product(writer)  # WAL the standby does not get
        wait_for(lambda: metrics_say(0, lambda lag: lag > 2), what="its lag seen growing")
    wait_for(lambda: metrics_say(1, lambda lag: lag == 0), what="the standby streaming again")
