"""The production server: gunicorn managing uvicorn workers, one per core, each serving
`app:create_app()`. Run it with `make serve-prod`, or
`gunicorn -c ops/gunicorn.conf.py 'app:create_app()'`.

gunicorn reads this file in its master process before it starts any worker, which is what the
settings below rely on.
"""

import logging
import multiprocessing
import os
import pathlib
import secrets
import tempfile

log = logging.getLogger("gunicorn.error")

bind = [os.environ.get("BIND", "127.0.0.1:8000")]
workers = int(os.environ.get("WEB_CONCURRENCY", multiprocessing.cpu_count()))
# uvicorn's worker, speaking uvicorn's httptools protocol with limits on a request's head (32 KiB,
# 100 fields, 10 s to arrive; shopapi/http_server.py). gunicorn's limit_request_line,
# limit_request_fields and limit_request_field_size would not apply: uvicorn parses requests.
worker_class = "shopapi.http_server.UvicornWorker"
# Idle kept-alive connections close after this (as `make serve`'s uvicorn does); a load balancer
# in front should give up on idle connections sooner.
keepalive = 5
# The app writes its own request log (JSON on stdout); gunicorn's would repeat it.
accesslog = None
# The app reads X-Forwarded-For itself, believing only the proxies FORWARDED_ALLOW_IPS names
# (shopapi/clients.py). gunicorn reads that variable too and hands it to the uvicorn workers,
# whose own reading would replace the peer's address before the app sees it (and takes any
# value, an address or not): theirs is off.
forwarded_allow_ips = ""

# Every worker must sign and check tokens and cursors with the same secrets. Unset, one is
# generated here, once, for all workers (tokens then end with the server; set them for real).
for _name in ("JWT_SECRET", "CURSOR_SECRET"):
    if _name not in os.environ:
        os.environ[_name] = secrets.token_urlsafe(32)

# Each worker keeps its metrics in files here and a scrape adds them up (prometheus_client's
# multiprocess mode). Set before any worker imports prometheus_client.
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="shopapi-metrics-"))


def on_starting(server):
    # Files a previous run left would be added into this run's counts.
    directory = pathlib.Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):
        stale.unlink()


def when_ready(server):
    """METRICS_BIND (host:port): serve /metrics on a separate, unauthenticated listener, from
    the master, summing every worker. Bind it where only Prometheus reaches."""
    address = os.environ.get("METRICS_BIND")
    if not address:
        return
    from prometheus_client import CollectorRegistry, multiprocess, start_http_server

    host, _, port = address.rpartition(":")
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    start_http_server(int(port), addr=host or "127.0.0.1", registry=registry)
    log.info("metrics on http://%s/metrics", address)


def child_exit(server, worker):
    # A dead worker's in-flight gauge must stop counting; its counters stay in the sums.
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)
