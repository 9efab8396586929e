"""An event stream (GET /events/stream) read as a client reads it, on a thread of its own; or
opened by a client that reads nothing until told to."""

import contextlib
import json
import queue
import select
import socket
import threading
import time
import urllib.parse

import h11
import httpx

from support.helpers import WAIT_SECONDS

ENDED = object()


class Stream:
    """One event stream, read on a thread of its own into `messages` (dicts of its fields; a
    comment as {"comment": ...})."""

    def __init__(self, base: str, headers: dict, path: str = "/v1/events/stream"):
        self.messages: queue.Queue = queue.Queue()
        self.ended_cleanly = False
        self._client = httpx.Client(timeout=httpx.Timeout(WAIT_SECONDS, read=None))
        self._response = self._client.stream("GET", base + path, headers=headers)
        self.response = self._response.__enter__()
        if self.response.status_code == 200:
            threading.Thread(target=self._read, daemon=True).start()
            self.opening = self.next_message()  # retry: and the position it starts after
        else:
            self.messages.put(ENDED)

    def _read(self) -> None:
        fields = {}
        try:
            for line in self.response.iter_lines():
                if not line:
                    if fields:
                        self.messages.put(fields)
                    fields = {}
                elif line.startswith(":"):
                    self.messages.put({"comment": line[1:].strip()})
                else:
                    name, _, value = line.partition(":")
                    fields[name] = value.removeprefix(" ")
            self.ended_cleanly = True  # the server ended the response as HTTP ends one
        except (httpx.HTTPError, RuntimeError):
            pass  # closed by the test, or cut off
        finally:
            self.messages.put(ENDED)

    def next_message(self):
        message = self.messages.get(timeout=WAIT_SECONDS)
        assert message is not ENDED, f"the stream ended ({self.response.status_code})"
        return message

    def events(self, count: int) -> list[dict]:
        """The next `count` events (keep-alive comments skipped), each with its data parsed,
        waited for as long as a test waits for anything (heartbeats do not extend it)."""
        deadline = time.monotonic() + WAIT_SECONDS
        events = []
        while len(events) < count:
            assert time.monotonic() < deadline, f"{len(events)} of {count} events came"
            message = self.next_message()
            if "data" in message:
                events.append({**message, "data": json.loads(message["data"])})
        return events

    def until_ended(self) -> list[dict]:
        """Every message until the stream ends (keep-alives included), waiting for the end for
        as long as a test waits for anything."""
        deadline = time.monotonic() + WAIT_SECONDS
        received = []
        while (message := self.messages.get(timeout=WAIT_SECONDS)) is not ENDED:
            received.append(message)
            assert time.monotonic() < deadline, f"the stream went on: {received[-3:]}"
        return received

    def nothing_more(self) -> bool:
        """Whether only comments are waiting (the events asked for were all that came)."""
        while not self.messages.empty():
            if "comment" not in self.messages.get_nowait():
                return False
        return True

    def close(self) -> None:
        self._response.__exit__(None, None, None)
        self._client.close()


@contextlib.contextmanager
def stream(base: str, headers: dict, path: str = "/v1/events/stream"):
    opened = Stream(base, headers, path)
    try:
        yield opened
    finally:
        opened.close()


def messages_of(body: bytes) -> list[dict]:
    """The messages of an event stream's body, as `Stream` reads them."""
    messages = []
    for block in body.decode().split("\n\n"):
        fields = {}
        for line in filter(None, block.split("\n")):
            name, _, value = line.partition(":")
            if name:
                fields[name] = value.removeprefix(" ")
        if fields:
            messages.append(fields)
    return messages


class UnreadStream:
    """An event stream whose client reads nothing until `read_to_end`: its receive buffer and its
    segments as small as the OS takes, so that the server's writes soon wait for it."""

    def __init__(self, base: str, headers: dict, path: str = "/v1/events/stream"):
        url = urllib.parse.urlsplit(base)
        self._socket = socket.socket()
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        if hasattr(socket, "TCP_MAXSEG"):  # else the server's send buffer grows to megabytes
            self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 536)
        self._socket.settimeout(WAIT_SECONDS)
        self._socket.connect((url.hostname, url.port))
        self._http = h11.Connection(h11.CLIENT)
        request = h11.Request(
            method="GET", target=path, headers=[("Host", url.netloc), *headers.items()]
        )
        self._socket.sendall(self._http.send(request) + self._http.send(h11.EndOfMessage()))

    def cut_off(self) -> bool:
        """Whether the server has reset the connection: seen without reading anything."""
        poller = select.poll()
        poller.register(self._socket, 0)  # no event asked for: only an error or a hang-up
        return bool(poller.poll(0))

    def read_to_end(self) -> tuple[int, bytes, bool]:
        """Everything the server sent: the status, the body, and whether the response ended as
        HTTP ends one (False: the connection was cut off)."""
        status, body = None, bytearray()
        while True:
            try:
                event = self._http.next_event()
            except h11.RemoteProtocolError:  # the connection closed before the response ended
                return status, bytes(body), False
            if event is h11.NEED_DATA:
                try:
                    self._http.receive_data(self._socket.recv(65536))
                except ConnectionResetError:
                    return status, bytes(body), False
                continue
            if isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return status, bytes(body), True

    def close(self) -> None:
        self._socket.close()


@contextlib.contextmanager
def unread_stream(base: str, headers: dict, path: str = "/v1/events/stream"):
    opened = UnreadStream(base, headers, path)
    try:
        yield opened
    finally:
        opened.close()
