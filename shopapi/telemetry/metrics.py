"""Prometheus metrics, summed over gunicorn's workers when PROMETHEUS_MULTIPROC_DIR is set; recorded
by shopapi.pipeline.observability. Why not a Flask exporter: docs/telemetry.md."""

import os

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

# `operation` is the spec's operationId, or one of these for requests no operation answered.
NO_OPERATION = "none"
PREFLIGHT = "preflight"

# `method` is one of HTTP's own (RFC 9110 9.3, and PATCH), else this: a method is any token a
# client cares to send (PROPFIND, MKCOL, ...), and each label value is a time series for good.
METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"}
)
OTHER_METHOD = "other"


def method_label(method: str) -> str:
    return method if method in METHODS else OTHER_METHOD


class Series(dict):
    """A labelled metric's series by their label values, each looked up once: prometheus_client's
    `labels()` checks and converts its values on every call, and a response records two."""

    def __init__(self, metric):
        super().__init__()
        self.metric = metric

    def __missing__(self, values: tuple):
        series = self[values] = self.metric.labels(*values)
        return series


REQUESTS = Counter(
    "http_requests_total",
    "Responses, by operation, method and status.",
    ["operation", "method", "status"],
)
DURATION = Histogram(
    "http_request_duration_seconds",
    "Time from the request's arrival to the end of its response.",
    ["operation", "method", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
# Bounded as the metrics are: by the operations, methods and statuses there are.
REQUESTS_SERIES = Series(REQUESTS)
DURATION_SERIES = Series(DURATION)
IN_FLIGHT = Gauge(
    "http_requests_in_flight",
    "Requests being handled now.",
    multiprocess_mode="livesum",
)
EVENT_STREAMS = Gauge(
    "event_streams_open",
    "Live event streams (GET /events/stream) open now; also in http_requests_in_flight.",
    multiprocess_mode="livesum",
)
SLOW_REQUESTS = Counter(
    "http_slow_requests_total",
    "Responses slower than SLOW_REQUEST_MS.",
    ["operation", "method"],
)
RATE_LIMITED = Counter(
    "http_rate_limited_total",
    "Requests refused with 429: over the client's quota (client), after too many failed "
    "authentication attempts from one address (failed_auth), too many wrong passwords for one "
    "account (failed_login), too many taken emails tried by one user (email_taken) or too many "
    "event streams open for one client (event_streams).",
    ["operation", "limit"],
)
REQUESTS_SHED = Counter(
    "http_requests_shed_total",
    "Requests refused with 503 at once because the server process was busy with as many as it "
    "answers promptly (ADMISSION_CONCURRENCY executing, the line waiting for a place full).",
    ["operation"],
)
RATE_LIMIT_STORAGE_ERRORS = Counter(
    "rate_limit_storage_errors_total",
    "Requests served without a rate limit because the limit store failed (fail open).",
)
STORE_OUTAGES = Counter(
    "store_outages_total",
    "Times a store stopped answering this process (the rate limits' or the write marks' Redis); "
    "each outage is counted and logged once, when it starts.",
    ["store"],
)
DATABASE_READS = Counter(
    "database_read_requests_total",
    "Requests that only read, by the database that answered them (replica or primary) and why: "
    "read (a replica was used), own_writes (the caller's latest write is not replayed yet), "
    "no_replica (every replica down or lagging), wrote (the request wrote after all), "
    "failed_over (its replica failed during it) or marks_unavailable (Redis did not answer).",
    ["database", "reason"],
)
# Set by each server process's replica checks (models/replicas.py, every 0.25 s); summed over
# gunicorn's workers as the worst any live one saw.
REPLICA_UP = Gauge(
    "database_replica_up",
    "1 while the replica answers its checks, else 0.",
    ["replica"],
    multiprocess_mode="livemin",
)
REPLICA_STREAMING = Gauge(
    "database_replica_streaming",
    "1 while the replica answers and receives WAL from its primary, else 0 (unreachable, or "
    "its WAL receiver stopped: a standby that cannot resume falls behind for good).",
    ["replica"],
    multiprocess_mode="livemin",
)
REPLICA_LAG = Gauge(
    "database_replica_lag_seconds",
    "How long ago the primary first had WAL the replica has not replayed (0: none; +Inf: the "
    "replica does not answer).",
    ["replica"],
    multiprocess_mode="livemax",
)


DATABASE_ROUND_TRIP = Gauge(
    "database_round_trip_seconds",
    "The median of this host's last five `SELECT 1` round trips to the primary, measured once a "
    "second (PostgreSQL only).",
    multiprocess_mode="livemax",
)


def replica_checked(name: str, up: bool, streaming: bool, lag_seconds: float) -> None:
    REPLICA_UP.labels(name).set(int(up))
    REPLICA_STREAMING.labels(name).set(int(up and streaming))
    REPLICA_LAG.labels(name).set(lag_seconds)


# Apart from http_requests_total: a balancer polls every second, and its probes (503 while
# an instance drains) are not the API's traffic nor its errors (spec/health.yaml).
PROBES = Counter(
    "http_probes_total",
    "Health probes answered (/healthz, /readyz), by operation and status.",
    ["operation", "status"],
)
ALERT_WEBHOOK_ERRORS = Counter(
    "alert_webhook_errors_total",
    "Alerts that could not be posted to ALERT_WEBHOOK_URL, or were dropped with the queue full.",
)


def exposition() -> tuple[bytes, str]:
    """The metrics in Prometheus text format, and their media type."""
    if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = REGISTRY
    # Plain text without a version is the classic text format to every Prometheus; Connexion
    # wants the media type exactly as the spec declares it.
    return generate_latest(registry), "text/plain"
