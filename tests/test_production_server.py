"""The production server (gunicorn with uvicorn workers, ops/gunicorn.conf.py): several workers
answer, and /metrics, on the API with its token and on the separate METRICS_BIND listener, adds
up what every worker counted; its workers give up on a body that does not arrive in time; and a
run leaves nothing behind it."""

import concurrent.futures
import itertools

import httpx
import pytest
from support.helpers import ONE_DATABASE, bearer
from support.live import free_port, production_server
from support.metrics_text import sample_sum
from support.raw_http import connect, post_head, problem_of, trickle

pytestmark = pytest.mark.slow

METRICS_TOKEN = "metrics-token-for-tests"
REQUESTS = 40


@ONE_DATABASE
def test_workers_share_one_metrics_view(app, database_url, tmp_path):
    metrics_port = free_port()
    metrics_dir = tmp_path / "metrics"
    with production_server(
        database_url,
        WEB_CONCURRENCY="2",
        METRICS_TOKEN=METRICS_TOKEN,
        METRICS_BIND=f"127.0.0.1:{metrics_port}",
        PROMETHEUS_MULTIPROC_DIR=str(metrics_dir),
    ) as base:
        headers = bearer()
        with concurrent.futures.ThreadPoolExecutor(max_workers=10) as pool:
            statuses = list(
                pool.map(
                    lambda _: httpx.get(f"{base}/v1/products", headers=headers).status_code,
                    range(REQUESTS),
                )
            )
        assert statuses == [200] * REQUESTS
        # One file of counters per worker process that counted something.
        assert len(list(metrics_dir.glob("counter_*.db"))) == 2

        labels = {"operation": "list_products", "method": "GET", "status": "200"}
        on_api = httpx.get(f"{base}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
        separate = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics")
        for scrape in (on_api, separate):
            assert scrape.status_code == 200
            assert sample_sum(scrape.text, "http_requests_total", **labels) == REQUESTS
            assert sample_sum(scrape.text, "http_request_duration_seconds_count", **labels) == (
                REQUESTS
            )
    # The operator's directory is theirs: left as it is.
    assert list(metrics_dir.glob("counter_*.db"))


@ONE_DATABASE
def test_a_body_that_does_not_arrive_in_time_is_given_up(app, database_url):
    # The workers speak the protocol `make serve` does, with its settings from the environment.
    with (
        production_server(
            database_url, WEB_CONCURRENCY="1", REQUEST_BODY_TIMEOUT_SECONDS="2"
        ) as base,
        connect(base) as connection,
    ):
        form = b"application/x-www-form-urlencoded"
        connection.sendall(post_head("/v1/oauth/token", form, length=1000))
        answer = trickle(connection, itertools.repeat(b"a"))
    assert problem_of(answer, 408)["detail"] == "The request's body took too long to arrive."


def test_a_run_leaves_nothing_in_the_temporary_directory_or_the_home(app, database_url, tmp_path):
    home, temporary = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    temporary.mkdir()
    with production_server(
        database_url,
        WEB_CONCURRENCY="2",
        HOME=str(home),
        TMPDIR=str(temporary),
        XDG_RUNTIME_DIR=None,
        PROMETHEUS_MULTIPROC_DIR=None,
    ) as base:
        assert httpx.get(f"{base}/v1/products", headers=bearer()).status_code == 200
        # The run's metrics directory, made where TMPDIR says.
        assert len(list(temporary.iterdir())) == 1
    # Stopped with SIGTERM, as a service manager stops it.
    assert list(home.iterdir()) == []
    assert list(temporary.iterdir()) == []
