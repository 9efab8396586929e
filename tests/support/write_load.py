"""Clients writing through the balancer as a careful client does: orders (now and then a product),
each with an Idempotency-Key and retried with that key after an error or a timeout (a 409 'in
flight' after its Retry-After), then read back by the same caller. Every attempt is recorded."""

import dataclasses
import itertools
import random
import threading
import time
import uuid

import httpx

from support.helpers import bearer

# A write still unanswered after retrying this long is given up (and reported).
GIVE_UP_SECONDS = 120
# A read of one's own write that keeps answering 404 is given up after this (and reported).
STALE_READ_SECONDS = 15
TIMEOUT = httpx.Timeout(10, connect=3)
# Waits between retries: doubled from the first to the last, or the answer's Retry-After.
FIRST_BACKOFF, LAST_BACKOFF, MOST_RETRY_AFTER = 0.1, 1.0, 5.0
PRODUCT_EVERY = 8  # one write in this many creates a product
SCARCE_SHARE = 0.25  # the orders that take a product which runs out, too


@dataclasses.dataclass(frozen=True)
class Attempt:
    client: int
    started: float
    ended: float
    what: str  # "order", "product", or "read"
    outcome: str  # the status ("201", "503 balancer", "409 in flight") or the transport error


@dataclasses.dataclass
class Write:
    client: int
    key: str
    what: str  # "order" or "product"
    path: str
    body: dict
    started: float
    status: int | None = None  # the final answer's status; None: given up
    answered: float | None = None  # when
    answer: dict | None = None  # the final answer's body
    read_back: str | None = None  # "equal", "differs", "missing", "unreadable" (2xx only)
    detail: str = ""


class WriteLoad:
    """`clients` threads, each writing one request at a time (then reading it back, then
    pausing `pause` seconds) until stopped, against `base`, each as a caller of its own. Orders
    are for `customer_id`: most take one of `plentiful`, some one of `scarce`, which run out
    (the orders then compete for the last units and are refused); products created are scarce."""

    def __init__(
        self,
        base: str,
        customer_id: int,
        plentiful: list[int],
        scarce: list[int],
        clients: int,
        pause: float,
    ):
        self.base, self.customer_id, self.pause = base, customer_id, pause
        self.plentiful, self.scarce = list(plentiful), list(scarce)
        self.attempts: list[Attempt] = []
        self.writes: list[Write] = []
        self._lock = threading.Lock()
        self._stop, self._abandon = threading.Event(), threading.Event()
        self._threads = [
            threading.Thread(target=self._client, args=(n,), name=f"client-{n}", daemon=True)
            for n in range(clients)
        ]

    def __enter__(self) -> "WriteLoad":
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.stop(abandon=exc_type is not None)

    def stop(self, abandon: bool = False) -> None:
        """Stop after each client's write under way is answered (or given up); or, if
        `abandon`, at its next retry."""
        self._stop.set()
        if abandon:
            self._abandon.set()
        for thread in self._threads:
            thread.join()

    @property
    def clients(self) -> int:
        return len(self._threads)

    def count(self) -> int:
        return len(self.attempts)

    def settled_since(self, moment: float) -> bool:
        """Whether every client has finished a write it began after `moment` (and so every
        write begun before it: a client has one at a time), with a 2xx."""
        done = {
            write.client
            for write in list(self.writes)
            if write.started > moment and write.status is not None and write.status < 300
        }
        return len(done) == len(self._threads)

    # -- One client

    def _client(self, n: int) -> None:
        rng = random.Random(n)
        headers = bearer(f"client:faults-{n}")
        with httpx.Client(base_url=self.base, headers=headers, timeout=TIMEOUT) as api:
            for i in itertools.count():
                if self._stop.is_set():
                    return
                key = f"c-{n}-{i}-{uuid.uuid4().hex[:12]}"
                if i % PRODUCT_EVERY == PRODUCT_EVERY - 1:
                    body = {
                        "sku": f"F-{key.upper()}",
                        "name": "Fault-tested",
                        "price_cents": rng.randint(100, 5000),
                        "stock": rng.randint(3, 30),
                    }
                    write = Write(n, key, "product", "/v1/products", body, time.monotonic())
                else:
                    with self._lock:
                        chosen = [rng.choice(self.plentiful)]
                        if rng.random() < SCARCE_SHARE:
                            chosen.append(rng.choice(self.scarce))
                    items = [{"product_id": p, "quantity": rng.randint(1, 3)} for p in chosen]
                    # The key in the order itself: the check of one order per key reads it.
                    body = {"user_id": self.customer_id, "items": items, "note": key}
                    write = Write(n, key, "order", "/v1/orders", body, time.monotonic())
                with self._lock:
                    self.writes.append(write)
                self._write(api, n, write)
                if write.status is not None and write.status < 300:
                    self._read_back(api, n, write)
                    if write.what == "product" and write.read_back == "equal":
                        with self._lock:
                            self.scarce.append(write.answer["id"])
                self._stop.wait(self.pause)

    def _attempt(self, api: httpx.Client, n: int, what: str, send) -> httpx.Response | None:
        started = time.monotonic()
        try:
            response = send()
        except httpx.TransportError as error:
            self._record(n, started, what, type(error).__name__)
            return None
        self._record(n, started, what, _outcome(response))
        return response

    def _record(self, n: int, started: float, what: str, outcome: str) -> None:
        self.attempts.append(Attempt(n, started, time.monotonic(), what, outcome))

    def _write(self, api: httpx.Client, n: int, write: Write) -> None:
        headers = {"Idempotency-Key": write.key}
        for retry in itertools.count():
            if time.monotonic() - write.started > GIVE_UP_SECONDS or self._abandon.is_set():
                write.detail = f"given up after {retry} attempts"
                return
            response = self._attempt(
                api, n, write.what, lambda: api.post(write.path, json=write.body, headers=headers)
            )
            if response is not None and response.status_code < 500 and not _in_flight(response):
                write.status, write.answered = response.status_code, time.monotonic()
                write.answer = _json(response)
                return
            _pause(response, retry)

    def _read_back(self, api: httpx.Client, n: int, write: Write) -> None:
        """The same caller reads its write at once: it must be there, as acknowledged."""
        path = f"{write.path}/{write.answer['id']}"
        missing_since = None
        for retry in itertools.count():
            response = self._attempt(api, n, "read", lambda: api.get(path))
            now = time.monotonic()
            if response is not None and response.status_code == 200:
                if not _holds(response.json(), write.answer):
                    write.read_back, write.detail = "differs", f"read back {response.text}"
                elif missing_since is not None:
                    write.read_back = "missing"
                    write.detail = f"404 for {now - missing_since:.1f} s, then there"
                else:
                    write.read_back = "equal"
                return
            if response is not None and response.status_code == 404:
                missing_since = missing_since or now
                if now - missing_since > STALE_READ_SECONDS:
                    write.read_back, write.detail = "missing", "404 until given up"
                    return
            elif now - write.started > GIVE_UP_SECONDS or self._abandon.is_set():
                write.read_back = "unreadable"
                return
            _pause(response, retry)


def _holds(read: dict, answer: dict) -> bool:
    """Whether `read` is the acknowledged `answer`: every field both show the same. During a
    rolling deploy a write may be answered by a host of one release and read back on a host of
    the other, and a release may add fields (this one adds `cancellation_reason`)."""
    shared = read.keys() & answer.keys()
    return "id" in shared and all(read[key] == answer[key] for key in shared)


def _outcome(response: httpx.Response) -> str:
    status = str(response.status_code)
    if _in_flight(response):
        return f"{status} in flight"
    if response.status_code >= 500 and "problem+json" not in response.headers.get(
        "content-type", ""
    ):
        return f"{status} balancer"  # HAProxy's own page: no host to send it to, or it died
    return status


def _in_flight(response: httpx.Response) -> bool:
    return response.status_code == 409 and "retry-after" in response.headers


def _json(response: httpx.Response):
    try:
        return response.json()
    except ValueError:
        return {"text": response.text}


def _pause(response: httpx.Response | None, retry: int) -> None:
    """Before a retry: the answer's Retry-After if it gave one, else a backoff."""
    after = response.headers.get("retry-after") if response is not None else None
    if after is not None and after.isdigit():
        time.sleep(min(int(after), MOST_RETRY_AFTER))
    else:
        time.sleep(min(FIRST_BACKOFF * 2**retry, LAST_BACKOFF))
