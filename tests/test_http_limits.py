"""A request is limited where uvicorn's own protocol does not (shopapi/pipeline/http_server.py):
its head's size, number of fields and time to arrive; its body's time to arrive, and the bytes of
bodies a process receives at once. The servers `make serve`, `make serve-prod` and the tests
start all speak that protocol."""

import concurrent.futures
import contextlib
import http
import itertools
import json
import re
import shlex
import socket
import time

import httpx
import pytest
from support.helpers import bearer, wait_for
from support.live import ROOT, SERVE_OPTIONS, live_server
from support.metrics_text import sample_sum
from support.raw_http import (
    connect,
    parse,
    post_head,
    problem_of,
    read_response,
    read_response_or_continue,
    trickle,
)

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


def _migrated_sqlite(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('http-limits')}/shopapi.db"
    db = open_database(url)
    migrate(db)
    db.close()
    return url


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    with live_server(_migrated_sqlite(tmp_path_factory)) as base:
        yield base


@pytest.fixture(scope="module")
def hurried(tmp_path_factory):
    """A server giving a body 2 s to arrive."""
    url = _migrated_sqlite(tmp_path_factory)
    with live_server(url, REQUEST_BODY_TIMEOUT_SECONDS="2") as base:
        yield base


@pytest.fixture(scope="module")
def bounded(tmp_path_factory):
    """A server holding at most 3 MiB of arriving bodies, 1.5 MiB of them one client's, and
    giving each body all the time a test needs, at any rate."""
    url = _migrated_sqlite(tmp_path_factory)
    with live_server(
        url,
        REQUEST_BODIES_IN_FLIGHT_MAX_BYTES=str(3 * MIB),
        REQUEST_BODIES_PER_CLIENT_MAX_BYTES=str(SHARE),
        REQUEST_BODY_TIMEOUT_SECONDS="3600",
        REQUEST_BODY_MIN_BYTES_PER_SECOND="0",
    ) as base:
        yield base


@pytest.fixture(scope="module")
def demanding(tmp_path_factory):
    """A server wanting 1,000 bytes a second of a body after a second's grace."""
    url = _migrated_sqlite(tmp_path_factory)
    with live_server(
        url, REQUEST_BODY_MIN_BYTES_PER_SECOND="1000", REQUEST_BODY_GRACE_SECONDS="1"
    ) as base:
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


MIB = 1024 * 1024
SHARE = 3 * MIB // 2
JSON = b"application/json"
FORM = b"application/x-www-form-urlencoded"


def _authorization(subject: str = "client:tests") -> bytes:
    return b"Authorization: " + bearer(subject)["Authorization"].encode()


def _product(sku: str) -> bytes:
    return json.dumps({"sku": sku, "name": "Slow", "price_cents": 100, "stock": 1}).encode()


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _given_up_on(base: str, head: bytes, pieces, every: float = 0.5) -> bytes:
    """`head`, then `pieces` one every `every` seconds: the answer once the server closes."""
    with connect(base) as connection:
        connection.sendall(head)
        return trickle(connection, pieces, every)


def test_a_body_that_does_not_arrive_in_time_is_given_up(hurried):
    # A byte every half second, never the whole body: each would do for an idle timeout, but the
    # body has REQUEST_BODY_TIMEOUT_SECONDS (2 s here) in all, then 408 and the connection closed.
    # Announced, chunked, and to the token endpoint, which anyone may call; side by side.
    product = _product("SLOW-1")
    announced = post_head("/v1/products", JSON, _authorization(), length=len(product) + 1000)
    chunked = post_head("/v1/products", JSON, _authorization())
    token = post_head("/v1/oauth/token", FORM, length=1000)
    cases = [
        (announced, itertools.chain([product], itertools.repeat(b" "))),
        (chunked, itertools.chain([_chunk(product)], itertools.repeat(_chunk(b" ")))),
        (token, itertools.chain([b"grant_type=password&password="], itertools.repeat(b"a"))),
    ]
    # And one to an unversioned path, its version asked for in Accept, with an id of its own.
    v3_accept = b"Accept: application/vnd.shopapi.v3+json"
    v3 = post_head("/products", JSON, _authorization(), v3_accept, b"X-Request-ID: slow-body-1")
    cases.append((v3, itertools.chain([_chunk(product)], itertools.repeat(_chunk(b" ")))))
    with concurrent.futures.ThreadPoolExecutor(len(cases)) as pool:
        answers = list(pool.map(lambda case: _given_up_on(hurried, *case), cases))
    # Like every other error (README): its request's path and id, and the version it was in.
    paths = ["/v1/products", "/v1/products", "/v1/oauth/token", "/v3/products"]
    for answer, path in zip(answers, paths, strict=True):
        problem = problem_of(answer, 408)
        headers = parse(answer)[1]
        assert problem == {
            "type": "about:blank",
            "title": "Request Timeout",
            "status": 408,
            "detail": "The request's body took too long to arrive.",
            "instance": path,
            "request_id": headers["x-request-id"],
        }
        assert headers["api-version"] == path[2]
    assert parse(answers[-1])[1]["x-request-id"] == "slow-body-1"


def test_a_slow_body_within_the_time_is_served_and_its_connection_kept(base):
    product = _product("SLOW-2")
    with connect(base) as connection:
        connection.sendall(post_head("/v1/products", JSON, _authorization(), length=len(product)))
        for start in range(0, len(product), 16):
            connection.sendall(product[start : start + 16])
            time.sleep(0.1)  # the slowness under test
        status, headers, body = parse(read_response(connection))
        assert status == b"HTTP/1.1 201 Created", body
        # The same connection takes the next request.
        location = headers["location"].encode()
        connection.sendall(b"GET " + location + b" HTTP/1.1\r\nHost: shop\r\n")
        connection.sendall(_authorization() + b"\r\n\r\n")
        status, _, body = parse(read_response(connection))
        assert status == b"HTTP/1.1 200 OK"
        assert json.loads(body)["sku"] == "SLOW-2"


# A request with a small body, refused at once whenever it is let in (no grant of that name).
LOGIN_FORM = b"grant_type=none"


def _answer_to_login(base: str, source: str, status: int | None = None) -> bytes | None:
    """The answer to a login from `source`; None when `status` is given and not the answer's."""
    login = post_head("/v1/oauth/token", FORM, b"Connection: close", length=len(LOGIN_FORM))
    with connect(base, source) as connection:
        connection.sendall(login + LOGIN_FORM)
        answer = trickle(connection, ())
    answered = parse(answer)[0].startswith(b"HTTP/1.1 %d " % status) if status else True
    return answer if answered else None


def _asking(base: str, source: str, status: int, *headers: bytes) -> bytes | None:
    """The answer to a body of 1 MiB from `source` that asks before it is sent (Expect:
    100-continue), if its status is `status`: one let in takes no room."""
    head = post_head("/v1/products", JSON, *headers, b"Expect: 100-continue", length=MIB)
    with connect(base, source) as connection:
        connection.sendall(head)
        answer = read_response_or_continue(connection)
    return answer if parse(answer)[0].startswith(b"HTTP/1.1 %d " % status) else None


def _holding(base: str, source: str, sent: int, *headers: bytes) -> socket.socket:
    """A connection from `source` announcing a body of 1 MiB and sending `sent` bytes of it."""
    connection = connect(base, source)
    connection.sendall(post_head("/v1/products", JSON, *headers, length=MIB))
    connection.sendall(b" " * sent)
    return connection


def test_bodies_in_flight_are_bounded_and_other_requests_still_served(bounded):
    # Four clients' bodies of 1 MiB, three quarters of each sent: the 3 MiB bound is taken.
    held = [
        _holding(bounded, f"127.0.0.{n}", 3 * MIB // 4, _authorization(f"client:holder-{n}"))
        for n in (2, 3, 4, 5)
    ]
    try:
        # The next body is refused, and says when to try again.
        answer = wait_for(lambda: _asking(bounded, "127.0.0.6", 503), "a body refused at the bound")
        assert problem_of(answer, 503)["detail"] == (
            "The server is receiving too many request bodies at once."
        )
        assert parse(answer)[1]["retry-after"] == "1"
        # A request without a body is served meanwhile.
        assert httpx.get(f"{bounded}/v1/openapi.json").status_code == 200
        # A body given up by its client makes room for the next one.
        held.pop().close()
        answer = wait_for(lambda: _answer_to_login(bounded, "127.0.0.6", 400), "room again")
        assert parse(answer)[0] == b"HTTP/1.1 400 Bad Request", answer
    finally:
        for connection in held:
            connection.close()


def test_bodies_announced_and_not_sent_keep_no_one_else_out(bounded):
    """Room is taken as a body's bytes come, not for the Content-Length its head announces:
    a client's idle connections, however many, hold none (each announcing 1 MiB, 40 would have
    held 40 MiB of the 3)."""
    idle = [_holding(bounded, "127.0.0.1", 0, _authorization()) for _ in range(40)]
    try:
        assert parse(_answer_to_login(bounded, "127.0.0.6"))[0] == b"HTTP/1.1 400 Bad Request"
        product = json.loads(_product("IDLE-1"))
        created = httpx.post(f"{bounded}/v1/products", json=product, headers=bearer())
        assert created.status_code == 201, created.text
        # The idle client's own next body is let in too: nothing of its share is taken.
        assert parse(_answer_to_login(bounded, "127.0.0.1"))[0] == b"HTTP/1.1 400 Bad Request"
    finally:
        for connection in idle:
            connection.close()


@pytest.mark.parametrize("shared", ["address", "credentials"])
def test_one_client_holds_at_most_its_share_of_the_bodies(bounded, shared):
    """A client is its address (an IPv6 address's /64) and, apart, the credentials it presents:
    what it holds beyond REQUEST_BODIES_PER_CLIENT_MAX_BYTES is refused with 429, to it alone."""
    if shared == "address":  # one address, different credentials
        sources = ["127.0.0.7"] * 4
        credentials = [_authorization(f"client:holder-{n}") for n in range(4)]
    else:  # one credential, different addresses
        sources = [f"127.0.0.{n}" for n in (8, 9, 10, 11)]
        credentials = [_authorization()] * 4
    pairs = list(zip(sources, credentials, strict=True))
    held = [_holding(bounded, source, MIB // 2, credential) for source, credential in pairs[:3]]
    try:
        source, credential = pairs[3]
        answer = wait_for(
            lambda: _asking(bounded, source, 429, credential), "the client's share to be held"
        )
        assert problem_of(answer, 429)["detail"] == (
            "This client is sending too many request bodies at once."
        )
        assert parse(answer)[1]["retry-after"] == "1"
        # Everyone else's bodies are let in meanwhile.
        assert parse(_answer_to_login(bounded, "127.0.0.12"))[0] == b"HTTP/1.1 400 Bad Request"
    finally:
        for connection in held:
            connection.close()


def test_a_body_below_the_minimum_rate_is_given_up_after_its_grace(demanding):
    # 50 bytes a second where 1,000 are asked for: 408 once the second's grace is over, long
    # before the body's 30 s. A body at twice the rate, for three seconds, is served.
    product = _product("TRICKLE-1")
    head = post_head("/v1/products", JSON, _authorization(), length=len(product) + 1000)
    started = time.monotonic()
    answer = _given_up_on(demanding, head, itertools.repeat(b" " * 5), every=0.1)
    took = time.monotonic() - started
    assert problem_of(answer, 408)["detail"] == (
        "The request's body arrives slower than 1000 bytes a second."
    )
    assert 1 <= took < 10
    sound = _product("SOUND-1") + b" " * 6000
    with connect(demanding) as connection:
        connection.sendall(post_head("/v1/products", JSON, _authorization(), length=len(sound)))
        for start in range(0, len(sound), 200):
            connection.sendall(sound[start : start + 200])
            time.sleep(0.1)  # 2,000 bytes a second: the pace under test
        status, _, body = parse(read_response(connection))
    assert status == b"HTTP/1.1 201 Created", body


def _requests_counted(base: str, **labels) -> float:
    scrape = httpx.get(f"{base}/metrics", headers=bearer())
    return sample_sum(scrape.text, "http_requests_total", operation="create_product", **labels)


def _products_listed(base: str, sku: str) -> list:
    return httpx.get(f"{base}/v1/products?sku={sku}", headers=bearer()).json()["data"]


def test_a_body_cut_off_is_not_acted_on(app, database_url):
    # A product's JSON whole, then spaces, which JSON allows after it: a body cut off there
    # would still parse. Chunked, it has no length to be found short by. It is not created,
    # whether its client or the timeout cut it off; the request log and metrics say 408, as the
    # client of the timeout is told, and no 500.
    with live_server(database_url, REQUEST_BODY_TIMEOUT_SECONDS="2") as base:
        head = post_head("/v1/products", JSON, _authorization(), b"Expect: 100-continue")
        with connect(base) as connection:
            connection.sendall(head)
            # The app is waiting for the body: what comes next reaches it.
            assert connection.recv(4096) == b"HTTP/1.1 100 Continue\r\n\r\n"
            connection.sendall(_chunk(_product("CUT-1") + b" "))
        wait_for(lambda: _requests_counted(base) == 1, "the cut-off request to end")
        assert _products_listed(base, "CUT-1") == []
        assert _requests_counted(base, status="408") == 1

        head = post_head("/v1/products", JSON, _authorization())
        pieces = itertools.chain([_chunk(_product("CUT-2"))], itertools.repeat(_chunk(b" ")))
        problem_of(_given_up_on(base, head, pieces), 408)
        wait_for(lambda: _requests_counted(base) == 2, "the timed-out request to end")
        assert _products_listed(base, "CUT-2") == []
        assert _requests_counted(base, status="408") == 2
