"""An event stream (GET /events/stream) read as a client reads it, on a thread of its own."""

import contextlib
import json
import queue
import threading

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
        """The next `count` events (keep-alive comments skipped), each with its data parsed."""
        events = []
        while len(events) < count:
            message = self.next_message()
            if "data" in message:
                events.append({**message, "data": json.loads(message["data"])})
        return events

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
