"""The production server (gunicorn with uvicorn workers, ops/gunicorn.conf.py): several workers
answer, and /metrics, on the API with its token and on the separate METRICS_BIND listener, adds
up what every worker counted; and a run leaves nothing behind it."""

import concurrent.futures

import httpx
import pytest
from support.helpers import bearer
from support.live import free_port, production_server
from support.metrics_text import sample_sum

pytestmark = pytest.mark.slow

METRICS_TOKEN = "metrics-token-for-tests"
REQUESTS = 40


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
