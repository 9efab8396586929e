"""A store that fails (the Redis of the rate limits and write marks) as this process sees it:
one warning when it stops answering, one line when it answers again, each outage counted
(`store_outages_total`), and a pause before it is asked again."""

import logging
import time

from shopapi.telemetry import metrics

log = logging.getLogger("shopapi.stores")


class Outages:
    def __init__(self, store: str, meanwhile: str, retry_after: float):
        """`store` names it in the log and the metric; `meanwhile` says what is done without it;
        after a failure it is left alone `retry_after` seconds."""
        self.store, self.meanwhile, self.retry_after = store, meanwhile, retry_after
        self.down = False
        self._retry_at = 0.0

    @property
    def pausing(self) -> bool:
        """Whether a failure was so recent that the store is not to be asked yet."""
        return time.monotonic() < self._retry_at

    def failed(self, error: object) -> None:
        self._retry_at = time.monotonic() + self.retry_after
        if not self.down:
            self.down = True
            metrics.STORE_OUTAGES.labels(self.store).inc()
            log.warning("%s unavailable, %s: %s", self.store, self.meanwhile, error)

    def answered(self) -> bool:
        """Note an answer; whether it ends an outage."""
        if not self.down:
            return False
        self.down = False
        log.info("%s answers again", self.store)
        return True
