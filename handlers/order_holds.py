"""Every server process expires the pending orders past their hold (ORDER_HOLD_SECONDS), every
ORDER_HOLD_SWEEP_SECONDS, on a thread of its own that the app's lifespan runs: handlers/orders.py's
`expire_overdue`, whose compare-and-set lets any number of processes sweep at once."""

import contextlib
import logging
import threading

from handlers.orders import EXPIRY_BATCH, expire_overdue
from models.db import close_connection

log = logging.getLogger("shopapi.order_holds")


class HoldSweeper:
    """A thread of the server process expiring overdue orders every `every` seconds."""

    def __init__(self, hold_seconds: int, every: float):
        self.hold_seconds = hold_seconds
        self.every = every
        self._stop = threading.Event()

    @contextlib.contextmanager
    def running(self):
        thread = threading.Thread(target=self._sweep, name="order-hold-sweeper", daemon=True)
        thread.start()
        try:
            yield
        finally:
            self._stop.set()
            thread.join(timeout=self.every + 5)

    def _sweep(self) -> None:
        while not self._stop.wait(self.every):
            try:
                while expire_overdue(self.hold_seconds) >= EXPIRY_BATCH and not self._stop.is_set():
                    pass
            except Exception as error:  # the database away: the next sweep tries again
                log.warning("could not expire overdue orders: %s", error)
            finally:
                close_connection()
