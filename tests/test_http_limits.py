"""A request's head is limited where uvicorn's own protocol does not
(shopapi/pipeline/http_server.py): its size, its number of fields and the time it takes to arrive;
the servers `make serve`, `make serve-prod` and the tests start all speak that protocol."""

import concurrent.futures
import contextlib
import http
import json
import re
import shlex
import socket
import time

import pytest
from support.live import ROOT, SERVE_OPTIONS, live_server

from models.db import open_database
from models.migrations import migrate
from shopapi.pipeline import http_server

pytestmark = pytest.mark.slow


def test_the_servers_the_tests_start_run_as_make_serve_does():
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^serve: .*?\n((?:\t.*\n)+)", makefile, re.MULTILINE).group(1)
    command = shlex.split(recipe.replace("\\\n", " ").splitlines()[-1])
    assert command[0].endswith("uvicorn")
    line = " ".join(command)
    assert " ".join(SERVE_OPTIONS) in line
    gunicorn_conf = (ROOT / "ops" / "gunicorn.conf.py").read_text()
    assert 'worker_class = "shopapi.pipeline.http_server.UvicornWorker"' in gunicorn_conf
    assert 'forwarded_allow_ips = ""' in gunicorn_conf


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('http-limits')}/shopapi.db"
    db = open_database(url)
    migrate(db)
    db.close()
    with live_server(url) as base:
        yield base


def _exchange(base: str, raw: bytes, deadline_seconds: float = 60) -> tuple[bytes, float]:
    """Send `raw` on a connection of its own; the status line that comes back (b"" when the
    server just closes) and how long it took."""
    host, port = base.removeprefix("http://").split(":")
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=deadline_seconds) as connection:
        # The server may answer and close while the rest is still being sent.
        with contextlib.suppress(ConnectionError):
            connection.sendall(raw)
        received = b""
        with contextlib.suppress(ConnectionError):
            while b"\r\n" not in received:
                chunk = connection.recv(4096)
                if not chunk:
                    break
                received += chunk
    return received.split(b"\r\n", 1)[0], time.monotonic() - started


def _request(*headers: bytes) -> bytes:
    return b"GET /v1/openapi.json HTTP/1.1\r\nHost: shop\r\n" + b"".join(headers) + b"\r\n"


def test_a_head_within_the_limits_is_served(base):
    big = b"X-Big: " + b"a" * (http_server.MAX_HEAD_BYTES - 1024) + b"\r\n"
    assert _exchange(base, _request(big))[0] == b"HTTP/1.1 200 OK"
    fields = [b"X-%d: v\r\n" % i for i in range(http_server.MAX_HEADER_FIELDS - 1)]
    assert _exchange(base, _request(*fields))[0] == b"HTTP/1.1 200 OK"


def test_an_oversized_head_is_refused(base):
    # Just over: sent whole, it is read whole, and the answer is not lost to a connection reset.
    huge = b"X-Big: " + b"a" * (http_server.MAX_HEAD_BYTES + 8192) + b"\r\n"
    assert _exchange(base, _request(huge))[0] == b"HTTP/1.1 431 Request Header Fields Too Large"
    fields = [b"X-%d: v\r\n" % i for i in range(http_server.MAX_HEADER_FIELDS)]
    status = _exchange(base, _request(*fields))[0]
    assert status == b"HTTP/1.1 431 Request Header Fields Too Large"


def test_an_overlong_target_is_refused_as_the_contract_says(base):
    within = b"/v1/openapi.json?q=" + b"a" * (http_server.MAX_TARGET_BYTES - 100)
    assert _exchange(base, b"GET " + within + b" HTTP/1.1\r\nHost: shop\r\n\r\n")[0] == (
        b"HTTP/1.1 200 OK"
    )
    # The lists declare 414 (a long `[in]` filter); the answer is a problem like any other.
    target = b"/v1/products?sku%5Bin%5D=" + b"A," * http_server.MAX_TARGET_BYTES
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as connection:
        with contextlib.suppress(ConnectionError):
            connection.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: shop\r\n\r\n")
        answer = b""
        with contextlib.suppress(ConnectionError):
            while chunk := connection.recv(65536):
                answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 414 ")
    assert b"content-type: application/problem+json" in head.lower()
    assert json.loads(body) == {
        "type": "about:blank",
        "title": http.HTTPStatus(414).phrase,
        "status": 414,
        "detail": "The request's target (path and query) is too long.",
    }


def test_a_head_that_does_not_arrive_in_time_is_given_up(base):
    # Half a head, then nothing: answered 408 and closed once the time is up, not held open. A
    # connection that sends nothing is closed too. The two wait out the time side by side.
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        half = pool.submit(_exchange, base, b"GET /v1/openapi.json HTTP/1.1\r\nHost: shop\r\n")
        nothing = pool.submit(_exchange, base, b"")
    status, took = half.result()
    assert status == b"HTTP/1.1 408 Request Timeout"
    assert http_server.HEAD_TIMEOUT_SECONDS - 1 <= took < http_server.HEAD_TIMEOUT_SECONDS + 30
    status, took = nothing.result()
    assert status == b""
    assert took < http_server.HEAD_TIMEOUT_SECONDS + 30
