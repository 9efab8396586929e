"""A Redis of a test's own (Debian's redis-server, nothing saved), on a free port of 127.0.0.1:
one that a test may stop and start again without touching the machine's."""

import shutil
import socket
import subprocess
import time

from shopapi.testing.ports import free_port

STARTUP_DEADLINE_SECONDS = 60


class RedisServer:
    def __init__(self):
        if shutil.which("redis-server") is None:
            raise RuntimeError("redis-server is not installed (Debian: redis-server)")
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> "RedisServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        """Start it (again, empty, on the same port); returns once it accepts connections."""
        self.process = subprocess.Popen(
            # No file written anywhere: an empty Redis after every start.
            [
                *("redis-server", "--bind", "127.0.0.1", "--port", str(self.port)),
                *("--save", "", "--appendonly", "no", "--loglevel", "warning"),
            ],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + STARTUP_DEADLINE_SECONDS
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=5) as connection:
                    connection.sendall(b"PING\r\n")
                    if connection.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop it: what it held is gone, and connections to it are refused."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
