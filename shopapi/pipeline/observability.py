"""Every response, whichever layer makes it, measured once with its final status: metrics, one
JSON log line, and a warning, count and alert when slower than SLOW_REQUEST_MS.
Design: docs/pipeline.md."""

import logging
import time

from asgi_correlation_id import correlation_id
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shopapi.internals import connexion as connexion_internals
from shopapi.pipeline.admission import SHED
from shopapi.pipeline.cors import is_preflight
from shopapi.pipeline.request_facts import client_address, operation_of
from shopapi.telemetry import metrics
from shopapi.telemetry.alerts import AlertWebhook

log = logging.getLogger("shopapi.requests")

# A user agent is logged up to this length: enough to identify it, too short to flood the log.
MAX_USER_AGENT = 200


class ObservabilityMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        slow_request_ms: int,
        alerts: AlertWebhook | None = None,
        probes: frozenset[str] = frozenset(),
        long_lived: frozenset[str] = frozenset(),
    ):
        self.app = app
        self.slow_request_ms = slow_request_ms
        self.alerts = alerts
        # The operations a balancer polls (every second): counted apart, logged when they fail.
        self.probes = probes
        # Operations whose responses last as long as the client stays (the event stream): their
        # durations are not latencies, so they stay out of the histogram and the slow alerts.
        self.long_lived = long_lived

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        connexion_internals.share_request_notes(scope)
        # As the client sent it: an unversioned path gets its version further in.
        path = scope["path"]
        status = 500  # what the client gets if the app fails before answering
        started = time.perf_counter()

        async def send_noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        metrics.IN_FLIGHT.inc()
        try:
            await self.app(scope, receive, send_noting_status)
        finally:
            metrics.IN_FLIGHT.dec()
            self._record(scope, path, status, time.perf_counter() - started)

    def _record(self, scope: Scope, path: str, status: int, seconds: float) -> None:
        routed = operation_of(scope)
        operation = routed.id if routed else _unrouted(scope)
        method = metrics.method_label(scope["method"])
        if operation in self.probes:
            metrics.PROBES.labels(operation, status).inc()
            if status < 400:
                return
            _log_request(_log_fields(scope, path, operation, routed.route, status, seconds))
            return
        labels = (operation, method, status)
        metrics.REQUESTS_SERIES[labels].inc()
        if scope["state"].get(SHED):
            # Counted, not logged one by one: an overload would flood the log (admission.py
            # says how many, at a bounded rate).
            metrics.DURATION_SERIES[labels].observe(seconds)
            return
        fields = _log_fields(scope, path, operation, routed and routed.route, status, seconds)
        _log_request(fields)
        if operation in self.long_lived:
            return
        metrics.DURATION_SERIES[labels].observe(seconds)
        if seconds * 1000 > self.slow_request_ms:
            metrics.SLOW_REQUESTS.labels(operation, method).inc()
            log.warning(
                "slow request: over %d ms",
                self.slow_request_ms,
                extra={"fields": {**fields, "threshold_ms": self.slow_request_ms}},
            )
            if self.alerts is not None:
                self.alerts.slow_request(fields, self.slow_request_ms)


def _log_request(fields: dict) -> None:
    """The request's line, made as `log.info` would make it but for looking for the file and line
    that logged it (a walk up the stack), which the JSON lines do not show."""
    if log.isEnabledFor(logging.INFO):
        record = log.makeRecord(log.name, logging.INFO, __file__, 0, "request", (), None)
        record.fields = fields
        log.handle(record)


def _unrouted(scope: Scope) -> str:
    return metrics.PREFLIGHT if is_preflight(scope) else metrics.NO_OPERATION


def _log_fields(
    scope: Scope, path: str, operation: str, route: str | None, status: int, seconds: float
):
    token_info = connexion_internals.token_info(scope) or {}
    user_agent = dict(scope["headers"]).get(b"user-agent", b"")[:MAX_USER_AGENT]
    return {
        "request_id": correlation_id.get(),
        "method": scope["method"],
        "path": path,
        "route": route,
        "operation": operation,
        "status": status,
        "duration_ms": round(seconds * 1000, 2),
        "client": token_info.get("sub"),
        "client_address": client_address(scope),
        "user_agent": user_agent.decode("latin-1"),
    }
