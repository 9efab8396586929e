"""A job a server process repeats in a thread of its own, off the requests' path: the replica
checks (models/replicas.py) and the round trip (models/round_trip.py)."""

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("shopapi.database")


def repeat(job: Callable[[], None], every: float, name: str, while_=lambda: True) -> None:
    """Run `job` every `every` seconds while `while_()`, in a daemon thread called `name`."""

    def run() -> None:
        while while_():
            started = time.monotonic()
            try:
                job()
            except Exception:  # a bug here must not stop the job, nor go unseen
                log.exception("%s failed", name)
            time.sleep(max(0.0, every - (time.monotonic() - started)))

    threading.Thread(target=run, name=name, daemon=True).start()
