"""A webhook receiver for tests: a real HTTP server on 127.0.0.1 in a thread, answering each
request as the test scripts it and recording every request it gets."""

import contextlib
import dataclasses
import http.server
import select
import ssl
import threading
from collections.abc import Callable

import orjson


@dataclasses.dataclass(frozen=True)
class Request:
    path: str
    headers: dict[str, str]  # names in lower case
    body: bytes

    @property
    def json(self):
        return orjson.loads(self.body)


@dataclasses.dataclass(frozen=True)
class Hold:
    """Keep the request open until `release` is set (or `seconds` pass), then answer `status`."""

    release: threading.Event = dataclasses.field(default_factory=threading.Event)
    seconds: float = 30
    status: int = 200


@dataclasses.dataclass(frozen=True)
class Drip:
    """Answer a byte every `interval` seconds and never finish the headers (for `seconds` at
    most, or until `release` is set): a receiver that never answers yet never falls silent, so
    a timeout per read never fires. Stops as soon as the client hangs up."""

    release: threading.Event = dataclasses.field(default_factory=threading.Event)
    interval: float = 0.1
    seconds: float = 30

    def answer(self, connection, write) -> None:
        stream = b"HTTP/1.1 200 OK\r\nX-Drip: " + b"a" * 10_000
        for byte in stream[: int(self.seconds / self.interval)]:
            # Readable means the client closed (it sends nothing more after its request).
            hung_up, _, _ = select.select([connection], [], [], 0)
            if hung_up or self.release.is_set():
                return
            try:
                write(bytes([byte]))
            except OSError:
                return
            self.release.wait(self.interval)


Answer = int | Hold | Drip


def in_turn(*answers: Answer, then: Answer = 200) -> Callable[[Request], Answer]:
    """Answer the first requests with `answers`, in order, and all others with `then`."""
    left = list(answers)
    return lambda request: left.pop(0) if left else then


class Receiver:
    def __init__(self, answer: Callable[[Request], Answer], tls: ssl.SSLContext | None = None):
        self.requests: list[Request] = []
        self._answer = answer
        self._lock = threading.Lock()
        self._holds: list[Hold | Drip] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                headers = {name.lower(): value for name, value in self.headers.items()}
                answer = receiver._take(Request(self.path, headers, body))
                if isinstance(answer, Drip):
                    self.close_connection = True
                    answer.answer(self.connection, self.wfile.write)
                    return
                if isinstance(answer, Hold):
                    answer.release.wait(answer.seconds)
                    answer = answer.status
                with contextlib.suppress(OSError):  # the worker may have gone meanwhile
                    self.send_response(answer)
                    self.send_header("Content-Length", "0")
                    self.end_headers()

            def log_message(self, *args):
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        scheme = "https" if tls else "http"
        self.url = f"{scheme}://127.0.0.1:{self._server.server_port}/hook"

    def _take(self, request: Request) -> Answer:
        with self._lock:
            self.requests.append(request)
            answer = self._answer(request)
            if isinstance(answer, Hold | Drip):
                self._holds.append(answer)
            return answer

    def __enter__(self) -> "Receiver":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc_info):
        for hold in self._holds:
            hold.release.set()
        self._server.shutdown()
        self._server.server_close()
