"""SIGTERM drains, under `make serve` (uvicorn) and `make serve-prod` (gunicorn): /readyz turns
503 at once while every request is still served, new ones too, for DRAIN_SECONDS; then the
server ends its event streams, stops accepting and finishes what is in flight before it exits."""

import concurrent.futures
import os
import signal
import socket
import time
import uuid

import httpx
import pytest
from support.event_stream import ENDED, stream
from support.helpers import WAIT_SECONDS, WAITS_UNBOUNDED, bearer, locked, scalar, wait_for
from support.live import signalled_server, starting_server

pytestmark = pytest.mark.slow

DRAIN_SECONDS = 2


def _inserts_waiting(database_url: str) -> int:
    return scalar(
        database_url,
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO \"product\"%%'",
    )


def _first_connection(port: int) -> socket.socket:
    """A connection to `port` the moment it is taken: the kernel takes one as soon as a socket
    listens there, before the server accepts it."""
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=WAIT_SECONDS)
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise AssertionError(f"waited {WAIT_SECONDS} s for port {port} to listen") from None
            time.sleep(0.002)  # a start's first instants are what this watches


def _answer(connection: socket.socket) -> bytes:
    """What the server sends back before it closes; b"" if it resets instead."""
    received = []
    with connection:
        try:
            while chunk := connection.recv(65536):
                received.append(chunk)
        except ConnectionResetError:
            return b""
    return b"".join(received)


def _refused(base: str) -> bool:
    try:
        httpx.get(f"{base}/healthz", timeout=5)
    except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError):
        # Refused, or taken from the listening socket's backlog as the server stopped and
        # closed unanswered (an empty answer, or a reset if the request's bytes were still
        # unread): either way no longer served.
        return True
    return False


@pytest.mark.parametrize("production", [False, True], ids=["uvicorn", "gunicorn"])
def test_sigterm_drains_then_finishes_what_is_in_flight(app, database_url, production):
    if not database_url.startswith("postgresql"):
        pytest.skip("draining is the server's, not the database's: PostgreSQL holds the request")
    with (
        signalled_server(
            database_url,
            production,
            DRAIN_SECONDS=str(DRAIN_SECONDS),
            WEB_CONCURRENCY="1",
            **WAITS_UNBOUNDED,  # the request in flight is held on a lock through the drain
        ) as (process, base),
        concurrent.futures.ThreadPoolExecutor(1) as pool,
        stream(base, bearer()) as events,
    ):
        assert httpx.get(f"{base}/readyz").status_code == 200
        new = {"sku": f"DRAIN-{uuid.uuid4().hex[:8].upper()}", "name": "Held", "price_cents": 100}
        with locked(database_url, "LOCK TABLE product IN EXCLUSIVE MODE"):
            held = pool.submit(
                httpx.post, f"{base}/v1/products", json=new, headers=bearer(), timeout=120
            )
            wait_for(lambda: _inserts_waiting(database_url), "the insert to wait on the lock")
            process.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            wait_for(lambda: httpx.get(f"{base}/readyz").status_code == 503, "/readyz to turn 503")
            # Still serving, on new connections too, while the balancer takes notice.
            assert httpx.get(f"{base}/healthz").status_code == 200
            assert httpx.get(f"{base}/v1/products", headers=bearer()).status_code == 200
            assert events.messages.empty()  # the event stream is still open
            wait_for(lambda: _refused(base), "the server to stop accepting")
            assert time.monotonic() - signalled >= DRAIN_SECONDS
            # The event stream, which would never end by itself, has ended, and cleanly.
            assert events.messages.get(timeout=WAIT_SECONDS) is ENDED
            assert events.ended_cleanly
            # Not accepting, but the request in flight is still being served.
            assert process.poll() is None
            assert not held.done()
        created = held.result(timeout=120)
        assert created.status_code == 201, created.text
        process.wait(timeout=120)


def test_sigterm_to_the_whole_process_group_drains_too(app, database_url):
    """systemd's default stop, and `kill -TERM -<pgid>`, reach gunicorn's workers twice: from
    the signal itself and from the master passing it on. That is one stop, and it drains."""
    if not database_url.startswith("postgresql"):
        pytest.skip("draining is the server's, not the database's")
    with signalled_server(
        database_url, True, DRAIN_SECONDS=str(DRAIN_SECONDS * 5), WEB_CONCURRENCY="2"
    ) as (process, base):
        assert httpx.get(f"{base}/readyz").status_code == 200
        os.killpg(process.pid, signal.SIGTERM)
        wait_for(lambda: httpx.get(f"{base}/readyz").status_code == 503, "/readyz to turn 503")
        assert httpx.get(f"{base}/v1/products", headers=bearer()).status_code == 200
        wait_for(lambda: _refused(base), "the server to stop accepting")
        process.wait(timeout=120)


@pytest.mark.parametrize("production", [False, True], ids=["uvicorn", "gunicorn"])
def test_sigterm_as_the_server_starts_answers_what_it_has_taken(app, database_url, production):
    """A connection the port takes is answered even when SIGTERM follows at once: a server (each
    gunicorn worker) listens only once its drain is in place. A gunicorn worker listened from
    its fork (gunicorn's socket, then its own), before its drain and even its event loop, and a
    SIGTERM then reset what the kernel had queued for it, as a deploy that stops a server just
    started would; so did the swap of one socket for the other."""
    if not database_url.startswith("postgresql"):
        pytest.skip("draining is the server's, not the database's")
    with starting_server(
        database_url, production, DRAIN_SECONDS=str(DRAIN_SECONDS), WEB_CONCURRENCY="2"
    ) as (process, port):
        connection = _first_connection(port)
        # Sent before the signal: however long this test then takes, the request has arrived
        # while the server still serves.
        connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        if production:
            os.killpg(process.pid, signal.SIGTERM)  # each worker, starting or serving
        else:
            process.send_signal(signal.SIGTERM)
        assert _answer(connection).startswith(b"HTTP/1.1 200 ")
        process.wait(timeout=WAIT_SECONDS)
