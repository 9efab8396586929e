"""The Prometheus scrape."""

from shopapi.telemetry.metrics import exposition


def scrape_metrics():
    body, media_type = exposition()
    return body, 200, {"Content-Type": media_type}
