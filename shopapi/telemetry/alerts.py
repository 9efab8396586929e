"""Slow-request alerts posted to ALERT_WEBHOOK_URL in Alertmanager's format, from a background
thread, at most one per operation per minute. More: docs/telemetry.md."""

import datetime
import logging
import queue
import threading
import time
import urllib.request

import orjson

from shopapi.telemetry import metrics

log = logging.getLogger("shopapi.alerts")

COOLDOWN_SECONDS = 60
# An alert stays active this long unless renewed.
ACTIVE_FOR = datetime.timedelta(minutes=5)
POST_TIMEOUT_SECONDS = 5


class AlertWebhook:
    def __init__(self, url: str, service: str = "shopapi"):
        self.url = url
        self.service = service
        self._queue: queue.Queue[bytes] = queue.Queue(maxsize=100)
        # When each operation last alerted: bounded by the contract's operations.
        self._last_sent: dict[str, float] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def slow_request(self, fields: dict, threshold_ms: int) -> None:
        """Alert that a request took longer than `threshold_ms` (its log fields say which)."""
        operation = fields["operation"]
        now = time.monotonic()
        with self._lock:
            if now - self._last_sent.get(operation, -COOLDOWN_SECONDS) < COOLDOWN_SECONDS:
                return
            self._last_sent[operation] = now
        starts = datetime.datetime.now(datetime.UTC)
        alert = {
            "labels": {
                "alertname": "SlowRequest",
                "service": self.service,
                "severity": "warning",
                "operation": operation,
                "method": fields["method"],
            },
            "annotations": {
                "summary": f"{fields['method']} {fields['route'] or fields['path']} took "
                f"{fields['duration_ms']} ms (threshold {threshold_ms} ms)",
                "request_id": fields["request_id"] or "",
            },
            "startsAt": starts.isoformat(),
            "endsAt": (starts + ACTIVE_FOR).isoformat(),
        }
        self._post_later(orjson.dumps([alert]))

    def _post_later(self, body: bytes) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._deliver, daemon=True)
                self._thread.start()
        try:
            self._queue.put_nowait(body)
        except queue.Full:
            metrics.ALERT_WEBHOOK_ERRORS.inc()
            log.warning("alert dropped: the alert queue is full")

    def _deliver(self) -> None:
        while True:
            body = self._queue.get()
            request = urllib.request.Request(  # noqa: S310 - the URL is checked to be http(s)
                self.url, data=body, headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=POST_TIMEOUT_SECONDS):  # noqa: S310
                    pass
            except OSError as error:
                metrics.ALERT_WEBHOOK_ERRORS.inc()
                log.warning("could not post an alert to the webhook: %s", error)
