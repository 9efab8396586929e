"""Rate limits as the spec declares them: `x-rate-limit` per caller and operation, and
`x-rate-limit-failed-auth` per address whose credentials are refused. Design: docs/pipeline.md."""

import dataclasses
import math
import time

import limits
from connexion.exceptions import ProblemException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shopapi.auth.security import CREDENTIAL_HEADERS
from shopapi.contract.operations import Operation, Operations
from shopapi.pipeline.account_limits import declared_attempt_limits, open_gate
from shopapi.pipeline.address_groups import address_group
from shopapi.pipeline.limit_counter import LimitCounter, TooManyRequests, Usage, scaled
from shopapi.pipeline.read_routing import READ_METHODS
from shopapi.pipeline.request_facts import caller_of, client_address, operation_of, revalidates
from shopapi.pipeline.write_marks import READ_ALONG, RedisMarks
from shopapi.telemetry import metrics

# Addresses over their limit of refused credentials, kept in this process (about 300 bytes
# each). Beyond this many the expired ones are dropped, then the oldest half of the rest: so
# many addresses (IPv6 gives a client plenty) cannot grow it without bound. A forgotten address
# costs a storage call at its next refusal, which finds it over the limit again.
MAX_BLOCKED_ADDRESSES = 10_000
# A caller's 304s are free up to this many times its operation's limit in the same window, then
# count as any answer does: polling stays cheap, and is bounded.
REVALIDATIONS_PER_REQUEST = 10


class RateLimitMiddleware:
    """Each operation's limits, after the security checks (the caller is known): its
    `x-rate-limit` per caller, counted here (the usage goes into the scope's state for
    ResponseHeadersMiddleware to put on the response, whichever layer makes it), and its
    per-account attempt limit, which the handler counts (`limited_attempt`)."""

    def __init__(
        self,
        app: ASGIApp,
        counter: LimitCounter,
        operations: Operations,
        scale: float,
        marks: RedisMarks | None = None,
    ):
        self.app = app
        self.counter = counter
        self.limits = {op.id: scaled(op.rate_limit, scale) for op in operations if op.rate_limit}
        self.revalidation_limits = {
            op: type(limit)(limit.amount * REVALIDATIONS_PER_REQUEST, limit.multiples)
            for op, limit in self.limits.items()
        }
        self.attempt_limits = declared_attempt_limits(operations, scale)
        # With replicas, the marks in Redis are in the counts' Redis (both SHARED_STORE_URL): a
        # read's hit reads its caller's write mark along (read routing, just inside, needs it),
        # one round trip where there were two.
        self.marks = marks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        operation = operation_of(scope) if scope["type"] == "http" else None
        if operation is not None and operation.id in self.attempt_limits:
            open_gate(scope, self.counter, operation.id, self.attempt_limits[operation.id])
        limit = self.limits.get(operation.id) if operation is not None else None
        if limit is not None and revalidates(scope, operation):
            await self._revalidation(scope, receive, send, operation, limit)
            return
        if limit is not None:
            caller = caller_of(scope)
            mark_key = self._mark_key(scope, caller)
            answer = await self.counter.hit_and_get(limit, (operation.id, caller), mark_key)
            _admit(scope, operation, _read_along(scope, answer, mark_key), counted=True)
        await self.app(scope, receive, send)

    def _mark_key(self, scope: Scope, caller: str) -> str:
        """The key of the caller's write mark, for a read when marks are kept in Redis; else
        "" (nothing read along)."""
        reads = self.marks is not None and scope["method"] in READ_METHODS
        return self.marks.key_of(caller) if reads else ""

    async def _revalidation(
        self, scope: Scope, receive: Receive, send: Send, operation: Operation, limit
    ) -> None:
        """A request revalidating a copy, let in by the count so far and counted once its answer
        is known not to be a 304: revalidating is the cheap way to poll. A 304 costs a hit of
        the operation's revalidation budget (REVALIDATIONS_PER_REQUEST times its limit), and
        beyond that budget counts as any answer does. A caller sending many at once may pass
        its limit by as many as it had in flight."""
        caller = caller_of(scope)
        mark_key = self._mark_key(scope, caller)
        answer = await self.counter.peek_and_get(limit, (operation.id, caller), mark_key)
        _admit(scope, operation, _read_along(scope, answer, mark_key), counted=False)
        started = False

        async def send_counting(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if message["status"] != 304 or await self._over_revalidations(operation, caller):
                    usage = await self.counter.hit(limit, operation.id, caller)
                    if usage is not None:
                        scope["state"]["rate_limit"] = usage
            await send(message)

        try:
            await self.app(scope, receive, send_counting)
        except Exception:
            if not started:  # an error answered by a layer outside this one: it counts too
                usage = await self.counter.hit(limit, operation.id, caller)
                if usage is not None:
                    scope["state"]["rate_limit"] = usage
            raise

    async def _over_revalidations(self, operation: Operation, caller: str) -> bool:
        """Count a 304 in the caller's revalidation budget; whether it is spent."""
        budget = self.revalidation_limits[operation.id]
        usage = await self.counter.hit(budget, operation.id, "revalidated", caller)
        return usage is not None and usage.exceeded


def _read_along(
    scope: Scope, answer: tuple[Usage, bytes | None] | None, mark_key: str
) -> Usage | None:
    """The usage of the counter's answer; the caller's write mark read along (under `mark_key`,
    if any) kept in the scope's state for read routing."""
    if answer is None:
        return None
    usage, mark = answer
    if mark_key:
        scope["state"][READ_ALONG] = mark
    return usage


def _admit(scope: Scope, operation: Operation, usage: Usage | None, counted: bool) -> None:
    """The request goes on with `usage` noted for its RateLimit-* headers, or is refused (429)
    over the limit (`counted`: whether `usage` counts the request). No usage: the storage did
    not answer, and the request goes on unlimited."""
    if usage is None:
        return
    if usage.count + (0 if counted else 1) > usage.limit.amount:
        metrics.RATE_LIMITED.labels(operation.id, "client").inc()
        limit = usage.limit
        raise TooManyRequests(
            usage,
            f"This client may call this operation {limit.amount} times every "
            f"{limit.get_expiry()} seconds; try again in {usage.reset_after} seconds.",
        )
    scope["state"]["rate_limit"] = usage


def _presents_credentials(scope: Scope) -> bool:
    return any(name.decode() in CREDENTIAL_HEADERS for name, _ in scope["headers"])


class FailedAuthMiddleware:
    """Counts refused credentials (401) per address; once an address is over its limit, its
    further refusals are 429 (with Retry-After) instead of 401 until the window ends. Valid
    credentials from it are served as ever: others' failures behind one address (a NAT), or a
    client polling with a revoked token, never hold them back. The limit is remembered in this
    process: a request costs a storage call only if it fails."""

    def __init__(
        self,
        app: ASGIApp,
        counter: LimitCounter,
        limit: limits.RateLimitItem,
    ):
        self.app = app
        self.counter = counter
        self.limit = limit
        self._blocked: dict[str, tuple[float, Usage]] = {}

    @property
    def blocked_addresses(self) -> int:
        """How many addresses this process remembers over the limit (expired ones included)."""
        return len(self._blocked)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _presents_credentials(scope):
            await self.app(scope, receive, send)
            return
        address = address_group(client_address(scope))
        # A handler's refusal (the token endpoint's invalid_client) is held back until it is
        # known whether it goes out as it is or becomes a 429.
        refusal: list[Message] = []

        async def send_holding_refusal(message: Message) -> None:
            if refusal or (message["type"] == "http.response.start" and message["status"] == 401):
                refusal.append(message)
            else:
                await send(message)

        try:
            await self.app(scope, receive, send_holding_refusal)
        except ProblemException as error:  # 401s from security are raised, not sent
            if error.status == 401:
                await self._count_failure(scope, address)
            raise
        if refusal:
            await self._count_failure(scope, address)
            for message in refusal:
                await send(message)

    async def _count_failure(self, scope: Scope, address: str) -> None:
        """Count one refusal from `address`; TooManyRequests when it is over the limit."""
        usage = self._known_over_limit(address)
        if usage is None:
            usage = await self.counter.hit(self.limit, "failed-auth", address)
            if usage is None:
                return
            if usage.count >= self.limit.amount:
                self._remember_blocked(address, usage)
            if not usage.exceeded:
                return
        operation = operation_of(scope)
        metrics.RATE_LIMITED.labels(
            operation.id if operation else metrics.NO_OPERATION, "failed_auth"
        ).inc()
        raise TooManyRequests(
            usage,
            f"Too many failed authentication attempts from this address; try again in "
            f"{usage.reset_after} seconds.",
        )

    def _known_over_limit(self, address: str) -> Usage | None:
        """The address's usage, if this process knows it over the limit until a later time."""
        blocked = self._blocked.get(address)
        if blocked is None:
            return None
        until, usage = blocked
        remaining = until - time.monotonic()
        if remaining <= 0:
            del self._blocked[address]
            return None
        return dataclasses.replace(usage, reset_after=math.ceil(remaining))

    def _remember_blocked(self, address: str, usage: Usage) -> None:
        if len(self._blocked) >= MAX_BLOCKED_ADDRESSES:
            now = time.monotonic()
            current = [(a, b) for a, b in self._blocked.items() if b[0] > now]
            self._blocked = dict(current[max(0, len(current) - MAX_BLOCKED_ADDRESSES // 2) :])
        self._blocked[address] = (time.monotonic() + usage.reset_after, usage)
