"""An alert reaches a person: Debian's Prometheus scrapes the production server (gunicorn, two
workers) as ops/prometheus/prometheus.yml says, with the token, and evaluates alerts.yml; Debian's
Alertmanager routes what fires as ops/alertmanager/alertmanager.yml says, to a webhook receiver.
Requests held by a database lock make the p99 latency alert fire; the lock gone, it resolves. A
standby cut from its primary's WAL pages too."""

import concurrent.futures

import httpx
import pytest
from support.helpers import bearer, locked, scalar, wait_for
from support.live import production_server
from support.monitoring import alertmanager, prometheus
from support.receiver import Receiver
from support.standby_stream import cut_from_its_primary

from models.db import open_database
from models.migrations import migrate
from shopapi.testing.standby import primary_and_standby

pytestmark = pytest.mark.slow

METRICS_TOKEN = "metrics-token-for-the-alert-test"
# alerts.yml's 5-minute windows and `for:` become 15 s: a test of a few dozen seconds, not ten
# minutes. The expressions are the same.
SPEEDUP = 20
# Requests held at a time; PostgreSQL holds each for a second (_held_long_enough), twice the
# rule's 0.5 s.
HELD = 2
LATENCY_ALERT = {"alertname": "ShopapiLatencyP99High", "job": "shopapi", "severity": "warning"}


def _held_long_enough(database_url: str) -> bool:
    waiting = scalar(
        database_url,
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock' AND clock_timestamp() - query_start > '1 second'",
    )
    return waiting >= HELD


def _slow_requests(pool, base: str, database_url: str) -> None:
    """HELD requests for the product list, each answered once it has waited a second."""
    with locked(database_url, "LOCK TABLE product IN ACCESS EXCLUSIVE MODE"):
        held = [
            pool.submit(httpx.get, f"{base}/v1/products", headers=bearer(), timeout=120)
            for _ in range(HELD)
        ]
        wait_for(lambda: _held_long_enough(database_url), "the requests to wait on the lock")
    assert [response.result().status_code for response in held] == [200] * HELD


def _notified(receiver: Receiver, status: str, alertname: str) -> dict | None:
    """The first alert called `alertname` that Alertmanager sent the receiver with `status`."""
    for request in list(receiver.requests):
        for alert in request.json["alerts"]:
            if alert["labels"]["alertname"] == alertname and alert["status"] == status:
                return alert
    return None


def test_slow_responses_page_and_then_resolve(app, database_url, direct_database_url, tmp_path):
    if not database_url.startswith("postgresql"):
        pytest.skip("the requests are held by a PostgreSQL lock")
    with (
        Receiver(lambda request: 200) as receiver,
        alertmanager(tmp_path / "alertmanager", receiver.url) as alertmanager_url,
        production_server(
            database_url,
            WEB_CONCURRENCY="2",
            METRICS_TOKEN=METRICS_TOKEN,
            # The service's own slow-request alerts go through the same Alertmanager.
            ALERT_WEBHOOK_URL=f"{alertmanager_url}/api/v2/alerts",
        ) as base,
        prometheus(
            tmp_path / "prometheus",
            base.removeprefix("http://"),
            METRICS_TOKEN,
            alertmanager_url,
            SPEEDUP,
        ) as monitor,
        concurrent.futures.ThreadPoolExecutor(HELD) as pool,
    ):
        # A fast request first: the latency series exist before the slow ones count in them.
        assert httpx.get(f"{base}/v1/products", headers=bearer()).status_code == 200
        wait_for(lambda: monitor.scrapes("shopapi"), "Prometheus to scrape the server")

        def slow_until_paged():
            _slow_requests(pool, base, direct_database_url)
            return _notified(receiver, "firing", LATENCY_ALERT["alertname"])

        try:
            firing = wait_for(slow_until_paged, "the latency alert")
            resolved = wait_for(
                lambda: _notified(receiver, "resolved", LATENCY_ALERT["alertname"]),
                "the latency alert to resolve",
            )
        except AssertionError as error:
            raise AssertionError(f"{error}; {monitor.state()}") from None

        for alert in (firing, resolved):
            assert alert["labels"] == LATENCY_ALERT
            assert alert["annotations"]["summary"] == "shopapi: p99 latency above 500ms"
        assert "threshold 500ms" in firing["annotations"]["description"]
        assert resolved["startsAt"] == firing["startsAt"]
        # The service's own alert, posted at the first slow request, arrived the same way.
        slow_request = wait_for(
            lambda: _notified(receiver, "firing", "SlowRequest"), "the SlowRequest alert"
        )
        assert slow_request["labels"]["operation"] == "list_products"


def test_a_standby_that_receives_no_wal_pages_and_then_resolves(tmp_path):
    """The production server reads from a hot standby; cut from its primary's WAL, the standby
    pages as ShopapiReplicaNotStreaming, and streaming again, the alert resolves."""
    with (
        primary_and_standby() as replication,
        Receiver(lambda request: 200) as receiver,
        alertmanager(tmp_path / "alertmanager", receiver.url) as alertmanager_url,
    ):
        primary = open_database(replication.primary.url)
        migrate(primary)
        primary.close_all()
        with (
            production_server(
                replication.primary.url,
                WEB_CONCURRENCY="2",
                METRICS_TOKEN=METRICS_TOKEN,
                DATABASE_REPLICA_URLS=replication.standby.url,
            ) as base,
            prometheus(
                tmp_path / "prometheus",
                base.removeprefix("http://"),
                METRICS_TOKEN,
                alertmanager_url,
                SPEEDUP,
            ) as monitor,
        ):
            wait_for(lambda: monitor.scrapes("shopapi"), "Prometheus to scrape the server")
            try:
                with cut_from_its_primary(replication.standby):
                    firing = wait_for(
                        lambda: _notified(receiver, "firing", "ShopapiReplicaNotStreaming"),
                        "the not-streaming alert",
                    )
                resolved = wait_for(
                    lambda: _notified(receiver, "resolved", "ShopapiReplicaNotStreaming"),
                    "the not-streaming alert to resolve",
                )
            except AssertionError as error:
                raise AssertionError(f"{error}; {monitor.state()}") from None

    standby = f"127.0.0.1:{replication.standby.port}/shopapi"
    for alert in (firing, resolved):
        assert alert["labels"]["replica"] == standby
        assert alert["labels"]["severity"] == "critical"
    assert firing["annotations"]["summary"] == f"shopapi: replica {standby} receives no WAL"
