"""What the servers write from start to stop, as `make serve` (uvicorn) and `make serve-prod`
(gunicorn) run them: JSON lines only, their own lifecycle lines included, as the request log is;
and each secret the configuration leaves to be generated warned of once, by the process that
generates it (the production server's master, not its workers)."""

import json
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
from support.live import (
    ROOT,
    STARTUP_DEADLINE_SECONDS,
    free_port,
    run_module,
    uvicorn_command,
    wait_until_up,
)
from support.raw_http import connect, trickle

from models.db import open_database
from models.migrations import migrate

pytestmark = pytest.mark.slow

GENERATED = ("JWT_SECRET", "HMAC_SECRET")
FIELDS = {"time", "level", "logger", "message"}


@pytest.fixture(scope="module")
def server_env(tmp_path_factory) -> dict:
    """A migrated database, no secrets set, and no request slow enough to be warned of."""
    url = f"sqlite:///{tmp_path_factory.mktemp('server-logs')}/shopapi.db"
    db = open_database(url)
    migrate(db)
    db.close()
    unset = (*GENERATED, "JWT_PRIVATE_KEY_FILE", "JWT_PUBLIC_KEY_FILE", "PROMETHEUS_MULTIPROC_DIR")
    env = {name: value for name, value in os.environ.items() if name not in unset}
    env = {**env, "DATABASE_URL": url, "SLOW_REQUEST_MS": "3600000"}
    # The demo accounts, whose published passwords start-up warns of.
    seeded = run_module("models.seed", {**env, "SEED_DEMO": "1"})
    assert seeded.returncode == 0, seeded.stderr
    return env


def _lines_of_a_run(
    command: list[str],
    port: int,
    env: dict,
    output: pathlib.Path,
    workers: int = 1,
    meanwhile: Callable[[str], None] = lambda base: None,
) -> list[str]:
    """Start `command`, wait until it serves on `port` with all its `workers` started, call
    `meanwhile` with its base URL, stop it (SIGTERM); the lines it wrote, stdout and stderr."""
    with output.open("w") as out:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            base = f"http://127.0.0.1:{port}"
            wait_until_up(base, process)
            # The first worker answers while the others may still be starting.
            deadline = time.monotonic() + STARTUP_DEADLINE_SECONDS
            while output.read_text().count("Application startup complete") < workers:
                assert process.poll() is None and time.monotonic() < deadline, "workers stuck"
                time.sleep(0.1)
            meanwhile(base)
        finally:
            process.terminate()
            process.wait(timeout=60)
    return [line for line in output.read_text().splitlines() if line.strip()]


def _entries(lines: list[str]) -> list[dict]:
    entries = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            pytest.fail(f"not a JSON line: {line}")
        assert entry.keys() >= FIELDS, line
        entries.append(entry)
    return entries


def _refused_by_the_protocol(base: str) -> None:
    """A request the server's protocol answers itself (414), before the app sees it."""
    with connect(base) as connection:
        target = b"/v1/products?q=" + b"a" * 20_000
        connection.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: shop\r\n\r\n")
        assert trickle(connection, ()).startswith(b"HTTP/1.1 414 ")


@pytest.fixture(scope="module")
def uvicorn_lines(server_env, tmp_path_factory) -> list[str]:
    port = free_port()
    command = uvicorn_command(port)
    output = tmp_path_factory.mktemp("uvicorn") / "output"
    return _lines_of_a_run(command, port, server_env, output, meanwhile=_refused_by_the_protocol)


@pytest.fixture(scope="module")
def gunicorn_lines(server_env, tmp_path_factory) -> list[str]:
    port = free_port()
    gunicorn = pathlib.Path(sys.executable).parent / "gunicorn"
    command = [gunicorn, "-c", "ops/gunicorn.conf.py", "app:create_app()"]
    env = {**server_env, "BIND": f"127.0.0.1:{port}", "WEB_CONCURRENCY": "2"}
    output = tmp_path_factory.mktemp("gunicorn") / "output"
    return _lines_of_a_run(command, port, env, output, workers=2)


def _warnings_of(entries: list[dict], name: str) -> list[dict]:
    return [e for e in entries if e["level"] == "warning" and e["message"].startswith(name)]


def test_uvicorn_writes_json_lines_only(uvicorn_lines):
    entries = _entries(uvicorn_lines)
    lifecycle = [e["message"] for e in entries if e["logger"] == "uvicorn.error"]
    assert any(message.startswith("Started server process") for message in lifecycle)
    assert any(message.startswith("Finished server process") for message in lifecycle)


def test_uvicorn_warns_once_of_each_generated_secret(uvicorn_lines):
    entries = _entries(uvicorn_lines)
    for name in GENERATED:
        (warning,) = _warnings_of(entries, f"{name} is not set")
        assert warning["logger"] == "shopapi.settings"
    assert not [line for line in uvicorn_lines if "deprecated" in line.lower()]


def test_a_request_the_protocol_refuses_is_not_logged_as_an_invalid_one(uvicorn_lines):
    # Its answer says what it was; uvicorn's "Invalid HTTP request received." would not.
    assert not [line for line in uvicorn_lines if "Invalid HTTP request" in line]


def test_gunicorn_writes_json_lines_only(gunicorn_lines):
    entries = _entries(gunicorn_lines)
    master = [e["message"] for e in entries if e["logger"] == "gunicorn.error"]
    assert any(message.startswith("Starting gunicorn") for message in master)
    assert any(message.startswith("Shutting down: Master") for message in master)
    workers = [e["message"] for e in entries if e["logger"] == "uvicorn.error"]
    assert len([m for m in workers if m.startswith("Started server process")]) == 2


def test_gunicorn_warns_once_of_each_generated_secret_from_its_master(gunicorn_lines):
    entries = _entries(gunicorn_lines)
    for name in GENERATED:
        (warning,) = _warnings_of(entries, f"{name} is not set")
        assert warning["logger"] == "gunicorn.error"
    assert not [line for line in gunicorn_lines if "deprecated" in line.lower()]


@pytest.mark.parametrize("server", ["uvicorn", "gunicorn"])
def test_published_passwords_are_warned_of_once_per_server(server, request):
    entries = _entries(request.getfixturevalue(f"{server}_lines"))
    (warning,) = [e for e in entries if e["logger"] == "shopapi.demo"]
    assert warning["accounts"] == ["admin@example.com", "carol@example.com", "paul@example.com"]
