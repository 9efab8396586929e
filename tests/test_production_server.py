"""The production server (gunicorn with uvicorn workers, ops/gunicorn.conf.py): several workers
answer, and /metrics, on the API with its token and on the separate METRICS_BIND listener, adds
up what every worker counted."""

import concurrent.futures
import os
import pathlib
import subprocess
import sys
import time

import httpx
import pytest
from helpers import JWT_SECRET, RATE_LIMIT_SCALE, bearer
from live import ROOT, STARTUP_DEADLINE_SECONDS, free_port
from metrics_text import sample_sum

pytestmark = pytest.mark.slow

METRICS_TOKEN = "metrics-token-for-tests"
REQUESTS = 40


def _wait_until_up(url: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + STARTUP_DEADLINE_SECONDS
    while True:
        try:
            httpx.get(url, timeout=10)
            return
        except httpx.TransportError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("gunicorn did not start") from None
            time.sleep(0.2)


def test_workers_share_one_metrics_view(app, database_url, tmp_path):
    port, metrics_port = free_port(), free_port()
    metrics_dir = tmp_path / "metrics"
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "JWT_SECRET": JWT_SECRET,
        "RATE_LIMIT_SCALE": str(RATE_LIMIT_SCALE),
        "BIND": f"127.0.0.1:{port}",
        "WEB_CONCURRENCY": "2",
        "METRICS_TOKEN": METRICS_TOKEN,
        "METRICS_BIND": f"127.0.0.1:{metrics_port}",
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
    }
    gunicorn = pathlib.Path(sys.executable).parent / "gunicorn"
    process = subprocess.Popen(
        [gunicorn, "-c", "ops/gunicorn.conf.py", "app:create_app()"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(f"{base}/v1/openapi.json", process)
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
    finally:
        process.terminate()
        process.wait(timeout=20)
