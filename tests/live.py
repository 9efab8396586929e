"""A real uvicorn server in a child process, for tests that need true concurrency or that
cut the database away under a running server."""

import contextlib
import os
import pathlib
import socket
import subprocess
import sys
import time

import httpx
from helpers import JWT_SECRET, RATE_LIMIT_SCALE

ROOT = pathlib.Path(__file__).resolve().parent.parent
STARTUP_DEADLINE_SECONDS = 120
# The options `make serve` gives uvicorn (tests/test_http_limits.py holds the Makefile to them):
# the app reads X-Forwarded-For itself (FORWARDED_ALLOW_IPS), and the protocol limits a
# request's head.
SERVE_OPTIONS = (
    "--no-proxy-headers",
    "--http",
    "shopapi.http_server:HttpProtocol",
    "--timeout-keep-alive",
    "5",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def live_server(database_url: str, **env):
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            "app:create_app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-access-log",
            *SERVE_OPTIONS,
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env={
            **os.environ,
            "DATABASE_URL": database_url,
            "JWT_SECRET": JWT_SECRET,
            "RATE_LIMIT_SCALE": str(RATE_LIMIT_SCALE),
            **env,
        },
    )
    base = f"http://127.0.0.1:{port}"
    try:
        # Generous: on a busy machine a cold start (imports, contract, database) takes many
        # seconds; a healthy one answers at once.
        deadline = time.monotonic() + STARTUP_DEADLINE_SECONDS
        while True:
            try:
                httpx.get(f"{base}/v1/openapi.json", timeout=10)
                break
            except httpx.TransportError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the server did not start") from None
                time.sleep(0.1)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=10)
