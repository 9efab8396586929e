"""A real uvicorn server in a child process, for tests that need true concurrency or that
cut the database away under a running server."""

import contextlib
import os
import pathlib
import subprocess
import sys
import time

import httpx

from shopapi.testing.ports import free_port
from support.helpers import JWT_SECRET, RATE_LIMIT_SCALE

ROOT = pathlib.Path(__file__).resolve().parents[2]
STARTUP_DEADLINE_SECONDS = 120
# A race needs its requests executing at once, as many as the server has threads: a server given
# these runs them all (no admission limit: shopapi/pipeline/admission.py), where one with the
# defaults would run a few and refuse the rest with 503.
ALL_AT_ONCE = {"ADMISSION_CONCURRENCY": "0"}
# The options `make serve` gives uvicorn (tests/test_http_limits.py holds the Makefile to them):
# its log lines are JSON, the app reads X-Forwarded-For itself (FORWARDED_ALLOW_IPS), and the
# protocol limits a request's head.
SERVE_OPTIONS = (
    "--log-config",
    "ops/logging.json",
    "--no-proxy-headers",
    "--http",
    "shopapi.pipeline.http_server:HttpProtocol",
    "--timeout-keep-alive",
    "5",
)


def wait_until_up(base: str, process: subprocess.Popen, log: pathlib.Path | None = None) -> None:
    """Until `process` serves the contract at `base`; a failure quotes the end of `log`."""
    # Generous: on a busy machine a cold start (imports, contract, database) takes many seconds,
    # and so can the first contract document (about a second on a quiet one); a healthy server
    # answers at once. A connection refused is asked again; an answer is waited for until the
    # deadline, not given up on and asked for again.
    deadline = time.monotonic() + STARTUP_DEADLINE_SECONDS
    while True:
        left = max(deadline - time.monotonic(), 1)
        try:
            httpx.get(f"{base}/v1/openapi.json", timeout=httpx.Timeout(left, connect=5))
            return
        except httpx.TransportError:
            if process.poll() is not None or time.monotonic() > deadline:
                output = f":\n{log.read_text()[-3000:]}" if log else ""
                raise RuntimeError(f"the server did not start: {process.args}{output}") from None
            time.sleep(0.1)


@contextlib.contextmanager
def _serving(process: subprocess.Popen, port: int):
    """The base URL of `process` once it answers on `port`; stopped (SIGTERM) after."""
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(base, process)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)


def _server_env(database_url: str, env: dict) -> dict:
    return {
        **os.environ,
        "DATABASE_URL": database_url,
        "JWT_SECRET": JWT_SECRET,
        "RATE_LIMIT_SCALE": str(RATE_LIMIT_SCALE),
        # Stopped at once: the tests of draining ask for it.
        "DRAIN_SECONDS": "0",
        **env,
    }


def uvicorn_command(port: int) -> list[str]:
    """uvicorn serving the app on `port` as `make serve` runs it."""
    return [
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
    ]


def run_module(
    module: str, env: dict, cwd: pathlib.Path = ROOT, args: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    """`python -m module args...` as `make` runs it (`make migrate`, `make seed`), with exactly
    `env`."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _uvicorn_process(port: int, database_url: str, env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [*uvicorn_command(port), "--log-level", "warning"],
        cwd=ROOT,
        env=_server_env(database_url, env),
    )


def _gunicorn_process(port: int, database_url: str, env: dict) -> subprocess.Popen:
    server_env = _server_env(database_url, {"BIND": f"127.0.0.1:{port}", **env})
    server_env = {name: value for name, value in server_env.items() if value is not None}
    gunicorn = pathlib.Path(sys.executable).parent / "gunicorn"
    return subprocess.Popen(
        [gunicorn, "-c", "ops/gunicorn.conf.py", "app:create_app()"],
        cwd=ROOT,
        env=server_env,
        stdout=subprocess.DEVNULL,
        # A process group of its own, as systemd gives a service: a test may signal all of it.
        start_new_session=True,
    )


@contextlib.contextmanager
def live_server(database_url: str, **env):
    """uvicorn serving the app as `make serve` does; its base URL."""
    port = free_port()
    with _serving(_uvicorn_process(port, database_url, env), port) as base:
        yield base


@contextlib.contextmanager
def live_servers(count: int, database_url: str, **env):
    """`count` servers as `live_server` starts them, started side by side (a start is mostly
    imports: on a busy machine, seconds each); their base URLs."""
    ports = [free_port() for _ in range(count)]
    processes = [
        subprocess.Popen(
            [*uvicorn_command(port), "--log-level", "warning"],
            cwd=ROOT,
            env=_server_env(database_url, env),
        )
        for port in ports
    ]
    with contextlib.ExitStack() as stack:
        for process in processes:
            stack.callback(process.wait, timeout=30)
            stack.callback(process.terminate)
        yield [
            stack.enter_context(_serving(p, port)) for p, port in zip(processes, ports, strict=True)
        ]


@contextlib.contextmanager
def production_server(database_url: str, **env):
    """gunicorn with uvicorn workers as `make serve-prod` runs it (ops/gunicorn.conf.py); its
    base URL. `env` may set WEB_CONCURRENCY and the rest of that file's settings; a variable
    given as None is removed from the server's environment."""
    port = free_port()
    with _serving(_gunicorn_process(port, database_url, env), port) as base:
        yield base


@contextlib.contextmanager
def starting_server(database_url: str, production: bool = False, **env):
    """As signalled_server, but not waited for, for a test of the server's start: its process
    and its port; stopped (SIGTERM) after."""
    port = free_port()
    start = _gunicorn_process if production else _uvicorn_process
    process = start(port, database_url, env)
    try:
        yield process, port
    finally:
        process.terminate()
        process.wait(timeout=30)


@contextlib.contextmanager
def signalled_server(database_url: str, production: bool = False, **env):
    """As live_server (production_server when `production`), for a test that signals the
    server itself: its process and its base URL."""
    with (
        starting_server(database_url, production, **env) as (process, port),
        _serving(process, port) as base,
    ):
        yield process, base
