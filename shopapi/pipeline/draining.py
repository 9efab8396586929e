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
        self._on_stop = []

    def on_stop(self, callback) -> None:
        """Call `callback` (from any thread) just before the server stops accepting: for what
        would otherwise hold its shutdown up, such as responses that never end by themselves."""
        self._on_stop.append(callback)

    def _stopping(self, server_handler, signum, frame) -> None:
        for callback in self._on_stop:
            callback()
        server_handler(signum, frame)

    @property
    def draining(self) -> bool:
        return self._started.is_set()

    @contextlib.asynccontextmanager
    async def lifespan(self, app):
        restore = self._defer_sigterm()
        restore_sigint = self._precede_sigint()
        try:
            yield
        finally:
            restore_sigint()
            restore()

    def _precede_sigint(self):
        """SIGINT stops at once, as it did, but ends what `on_stop` names first."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        server_handler = signal.getsignal(signal.SIGINT)
        if not callable(server_handler) or server_handler is signal.default_int_handler:
            return lambda: None

        def on_sigint(signum, frame):
            self._stopping(server_handler, signum, frame)

        signal.signal(signal.SIGINT, on_sigint)

        def restore():
            if signal.getsignal(signal.SIGINT) is on_sigint:
                signal.signal(signal.SIGINT, server_handler)

        return restore

    def _defer_sigterm(self):
        # Signal handlers belong to the main thread; a test client runs the lifespan elsewhere.
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        server_handler = signal.getsignal(signal.SIGTERM)
        if not callable(server_handler):  # SIGTERM left to the OS: nothing to hand over to
            return lambda: None

        def on_sigterm(signum, frame):
            if self._started.is_set():
                # The same stop again: SIGTERM sent to a process group reaches a gunicorn
                # worker twice (directly, and passed on by the master). SIGINT stops at once.
                log.info("SIGTERM again: still draining")
                return
            self._started.set()
            log.info("SIGTERM: draining for %s s, /readyz answers 503", self.seconds)
            # The server's handler only sets a flag its loop polls: safe from another thread.
            timer = threading.Timer(self.seconds, self._stopping, (server_handler, signum, None))
            timer.daemon = True
            timer.start()

        signal.signal(signal.SIGTERM, on_sigterm)

        def restore():
            if signal.getsignal(signal.SIGTERM) is on_sigterm:
                signal.signal(signal.SIGTERM, server_handler)

        return restore
