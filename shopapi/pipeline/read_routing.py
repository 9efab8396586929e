"""Sends a request that only reads to a replica that has replayed its caller's latest write, and
notes where each write left the primary for that caller's next reads (when replicas are
configured). The rules: docs/database.md."""

from functools import partial

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from models.bounds import Bounds
from models.replicas import CHECK_EVERY, Replicas
from models.routing import Route, current_route
from shopapi.pipeline import event_stream
from shopapi.pipeline.request_facts import caller_of, operation_of
from shopapi.pipeline.write_marks import (
    READ_ALONG,
    MarksUnavailable,
    MemoryMarks,
    RedisMarks,
    write_marks,
)
from shopapi.settings import Settings
from shopapi.telemetry import metrics

READ_METHODS = frozenset({"GET", "HEAD"})


class ReadRoutingMiddleware:
    def __init__(self, app: ASGIApp, replicas: Replicas, marks):
        self.app = app
        self.replicas = replicas
        self.marks = marks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        operation = operation_of(scope) if scope["type"] == "http" else None
        # An event stream reads through its poller, on the primary: it has no route.
        if operation is None or operation.id == event_stream.OPERATION_ID:
            await self.app(scope, receive, send)
            return
        caller = caller_of(scope)
        reads = scope["method"] in READ_METHODS
        route, reason = Route(), None
        if reads:
            route, reason = await self._route_for(caller, scope["state"])

        async def send_after_noting(message: Message) -> None:
            # Noted before the client hears of its write, so its next read finds the mark.
            if message["type"] == "http.response.start" and route.written_at is not None:
                await self.marks.note(caller, route.written_at)
            await send(message)

        token = current_route.set(route)
        try:
            await self.app(scope, receive, send_after_noting)
        finally:
            current_route.reset(token)
            if route.failure is not None:
                self.replicas.failed(*route.failure)
        if reads:
            served = "replica" if route.replica is not None else "primary"
            if route.chosen is not None and route.replica is None:
                reason = "failed_over" if route.failure is not None else "wrote"
            metrics.DATABASE_READS.labels(served, reason).inc()

    async def _route_for(self, caller: str, state: dict) -> tuple[Route, str]:
        """The route of a read, and why it goes where it goes."""
        try:
            if READ_ALONG in state:  # by the rate limit, with its hit
                written_at = self.marks.written_at_from(state.pop(READ_ALONG))
            else:
                written_at = await self.marks.written_at(caller)
        except MarksUnavailable:
            return Route(), "marks_unavailable"
        replica = self.replicas.choose(written_at)
        if replica is not None:
            return Route(replica), "read"
        if written_at is not None and self.replicas.choose(None) is not None:
            return Route(), "own_writes"  # the replicas have not replayed them yet
        return Route(), "no_replica"


def marks_of(settings: Settings) -> MemoryMarks | RedisMarks | None:
    """Where `settings`' replicas find their callers' writes; None when there are no replicas."""
    if not settings.database_replica_urls:
        return None
    # A mark is needed until the replicas replayed the write, or lag too far to be used at all.
    keep_seconds = settings.database_replica_max_lag_seconds + 2 * CHECK_EVERY + 1
    return write_marks(settings.shared_store_url, keep_seconds)


def read_routing(settings: Settings, marks: MemoryMarks | RedisMarks | None):
    """The layer for `settings`' replicas, with their `marks_of`; None when there are none."""
    if marks is None:
        return None
    replicas = Replicas(
        settings.database_url,
        settings.database_replica_urls,
        settings.database_pool_size,
        settings.database_replica_max_lag_seconds,
        Bounds.configured(settings),
        observe=lambda replica: metrics.replica_checked(
            replica.name, replica.up, replica.streaming, replica.lag_seconds
        ),
    )
    return partial(ReadRoutingMiddleware, replicas=replicas, marks=marks)
