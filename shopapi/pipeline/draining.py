"""Draining on SIGTERM: /readyz turns 503 at once while the server keeps serving for
DRAIN_SECONDS, long enough for a balancer to stop sending; then the server's own SIGTERM handling
runs (it stops accepting and finishes what is in flight). Design: docs/pipeline.md."""

import contextlib
import logging
import signal
import threading

log = logging.getLogger("shopapi.draining")


class Drain:
    """One server process's drain. Installed by the app's lifespan, in front of the SIGTERM
    handler the server (uvicorn, and gunicorn's uvicorn worker) put there, which it defers."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self._started = threading.Event()

    @property
    def draining(self) -> bool:
        return self._started.is_set()

    @contextlib.asynccontextmanager
    async def lifespan(self, app):
        restore = self._defer_sigterm()
        try:
            yield
        finally:
            restore()

    def _defer_sigterm(self):
        # Signal handlers belong to the main thread; a test client runs the lifespan elsewhere.
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        server_handler = signal.getsignal(signal.SIGTERM)
        if not callable(server_handler):  # SIGTERM left to the OS: nothing to hand over to
            return lambda: None

        def on_sigterm(signum, frame):
            if self._started.is_set():  # a second SIGTERM: stop now
                server_handler(signum, frame)
                return
            self._started.set()
            log.info("SIGTERM: draining for %s s, /readyz answers 503", self.seconds)
            # The server's handler only sets a flag its loop polls: safe from another thread.
            timer = threading.Timer(self.seconds, server_handler, (signum, None))
            timer.daemon = True
            timer.start()

        signal.signal(signal.SIGTERM, on_sigterm)

        def restore():
            if signal.getsignal(signal.SIGTERM) is on_sigterm:
                signal.signal(signal.SIGTERM, server_handler)

        return restore
