"""The live event stream's one poller per process: while any stream is open it reads new events
every few tenths of a second, in a thread holding a pooled connection only for the read, and
hands each to the streams that may see it; and it ends the streams whose credentials are revoked.
Design: docs/events.md."""

import asyncio
import collections
import concurrent.futures
import contextvars
import logging
import time
from collections.abc import Callable

from models import Event
from models.db import close_connection
from models.visibility import Viewer
from shopapi.auth.revocations import Revocations

log = logging.getLogger("shopapi.events.stream")

# Events read at once, by the poller and by a resuming stream's catch-up.
BATCH = 500
# The threads that read for the streams, each with a pooled connection while it reads (app.py
# counts them in the pool's size).
THREADS = 2
# Events a stream may have waiting to be written; a client that falls further behind is cut off
# and resumes with Last-Event-ID from the database, so nothing it may see is lost.
BACKLOG = 1000
# Ids are taken when an event is written, and its transaction may commit after a later one's:
# an id missing after ones that are there is waited for this long before it is given up on (a
# rollback leaves it missing for ever). Events after it are held meanwhile, so that the stream
# stays in id order and Last-Event-ID resumes it exactly.
GAP_WAIT_SECONDS = 5.0


class StreamsFull(Exception):
    """No stream for this client now: `per_client` when it has as many as it may have, else
    the process has as many as it takes (or is shutting down)."""

    def __init__(self, per_client: bool):
        super().__init__("per client" if per_client else "in all")
        self.per_client = per_client


class Subscription:
    """One open stream: what its caller may see, and the events waiting to be written."""

    def __init__(
        self,
        caller: str,
        viewer: Viewer,
        resource_types: list[str],
        revocable: tuple[int, int, str | None] | None,
    ):
        self.caller = caller
        self.viewer = viewer
        self.resource_types = resource_types
        # The user, credentials version and login whose revocation ends it (security.revocable).
        self.revocable = revocable
        self.waiting: collections.deque[Event] = collections.deque()
        self.ended: str | None = None  # why the stream must end: overflow, revoked, shutdown, ...
        self.wake = asyncio.Event()
        # Called once as it ends: the stream stops whatever it is waiting for.
        self.on_end: Callable[[], None] | None = None

    def offer(self, event: Event) -> None:
        if self.ended is None and event.is_seen_by(self.viewer, self.resource_types):
            if len(self.waiting) >= BACKLOG:
                self.end("overflow")
            else:
                self.waiting.append(event)
                self.wake.set()

    def end(self, reason: str) -> None:
        if self.ended is None:
            self.ended = reason
            if self.on_end is not None:
                self.on_end()
        self.wake.set()

    def is_revoked_in(self, revocations: Revocations) -> bool:
        return self.revocable is not None and revocations.ends(*self.revocable)


class EventStreams:
    """Every open stream of this process, and the poller that feeds them while there are any."""

    def __init__(
        self, poll_seconds: float, max_open: int, max_per_client: int, revocations: Revocations
    ):
        self.poll_seconds = poll_seconds
        self.max_open = max_open
        self.max_per_client = max_per_client
        self.revocations = revocations
        self._revocations_seen = revocations.changes
        self._subscriptions: set[Subscription] = set()
        self._per_caller: collections.Counter[str] = collections.Counter()
        # Every event up to `head` has been handed out (or given up on); None until first read.
        self.head: int | None = None
        self._gap_since: float | None = None
        self._poller: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        # Reads run here, not on the event loop, and not on Flask's threads.
        self._threads = concurrent.futures.ThreadPoolExecutor(THREADS, "event-stream")

    @property
    def open(self) -> int:
        return len(self._subscriptions)

    def subscribe(
        self,
        caller: str,
        viewer: Viewer,
        resource_types: list[str],
        revocable: tuple[int, int, str | None] | None,
    ) -> Subscription:
        """A new stream for `caller`; StreamsFull when over a limit or shutting down."""
        if self._per_caller[caller] >= self.max_per_client:
            raise StreamsFull(per_client=True)
        if self._closed or len(self._subscriptions) >= self.max_open:
            raise StreamsFull(per_client=False)
        self._loop = asyncio.get_running_loop()
        subscription = Subscription(caller, viewer, resource_types, revocable)
        if subscription.is_revoked_in(self.revocations):  # since its check, and the last sweep
            subscription.end("revoked")
        self._subscriptions.add(subscription)
        self._per_caller[caller] += 1
        if self._poller is None:
            # Its own context: not the first subscriber's request id, route or anything else.
            self._poller = self._loop.create_task(self._poll(), context=contextvars.Context())
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        if subscription in self._subscriptions:
            self._subscriptions.remove(subscription)
            self._per_caller[subscription.caller] -= 1
            if not self._per_caller[subscription.caller]:
                del self._per_caller[subscription.caller]

    async def current_head(self) -> int:
        """The id up to which every event has been handed out (read now if the poller has not
        yet): what a stream catches up to from the database before it takes what is offered."""
        if self.head is None:
            latest = await self.read(Event.latest_id)
            if self.head is None:
                self.head = latest
        return self.head

    async def read(self, query, *args):
        """`query(*args)` run on a stream thread with a pooled connection, returned at once."""
        return await asyncio.get_running_loop().run_in_executor(
            self._threads, contextvars.Context().run, _with_connection, query, *args
        )

    def close(self) -> None:
        """End every stream and take no more (the server is stopping). Callable from any
        thread, a signal handler's included."""
        self._closed = True
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._end_all)

    def _end_all(self) -> None:
        for subscription in list(self._subscriptions):
            subscription.end("shutdown")

    async def _poll(self) -> None:
        try:
            failing = False
            while self._subscriptions:
                try:
                    await self._poll_once()
                    failing = False
                except Exception as error:  # the poller goes on: a dead one would feed nothing
                    if not failing:  # once an outage, not every poll
                        log.warning("event stream: reading the database failed: %s", error)
                    failing = True
                await asyncio.sleep(self.poll_seconds)
        finally:
            self._poller = None
            if not self._subscriptions:
                self.head = None  # read again when a stream next opens

    async def _poll_once(self) -> None:
        await self._end_revoked()
        if self.head is None:
            latest = await self.read(Event.latest_id)
            if self.head is None:
                self.head = latest
            return
        while True:
            events = await self.read(Event.after, self.head, BATCH)
            for event in events:
                if event.id != self.head + 1 and not self._gap_given_up(event.id):
                    return
                self._gap_since = None
                self.head = event.id
                for subscription in list(self._subscriptions):
                    subscription.offer(event)
            if len(events) < BATCH:
                return

    async def _end_revoked(self) -> None:
        """End the streams whose credentials were revoked, as this process knows it: known no
        more than REFRESH_EVERY before the events read next, which no such stream then gets."""
        if not self.revocations.is_current():
            await asyncio.get_running_loop().run_in_executor(
                self._threads, contextvars.Context().run, self.revocations.refresh
            )
        if self.revocations.changes != self._revocations_seen:
            self._revocations_seen = self.revocations.changes
            for subscription in list(self._subscriptions):
                if subscription.is_revoked_in(self.revocations):
                    subscription.end("revoked")

    def _gap_given_up(self, next_id: int) -> bool:
        now = time.monotonic()
        if self._gap_since is None:
            self._gap_since = now
        given_up = now - self._gap_since >= GAP_WAIT_SECONDS
        if given_up:
            missing = f"{self.head + 1}-{next_id - 1}" if next_id > self.head + 2 else self.head + 1
            log.warning("event stream: no event %s after %s s; going on", missing, GAP_WAIT_SECONDS)
        return given_up


def _with_connection(query, *args):
    error = None
    try:
        return query(*args)
    except Exception as failure:
        error = failure
        raise
    finally:
        close_connection(error)
