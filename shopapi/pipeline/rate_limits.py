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
from shopapi.pipeline.attempt_limits import declared_attempt_limits, open_gate
from shopapi.pipeline.limit_counter import LimitCounter, TooManyRequests, Usage, scaled
from shopapi.pipeline.request_facts import caller_of, client_address, operation_of
from shopapi.telemetry import metrics

# Addresses blocked after failed authentication, kept in this process (about 300 bytes each).
# Beyond this many the expired ones are dropped, then the oldest half of the rest: so many
# addresses (IPv6 gives a client plenty) cannot grow it without bound. A forgotten address is
# no longer refused before its credentials are checked, but its next failure blocks it again.
MAX_BLOCKED_ADDRESSES = 10_000


class RateLimitMiddleware:
    """Each operation's limits, after the security checks (the caller is known): its
    `x-rate-limit` per caller, counted here (the usage goes into the scope's state for
    ResponseHeadersMiddleware to put on the response, whichever layer makes it), and its
    per-account attempt limit, which the handler counts (`limited_attempt`)."""

    def __init__(self, app: ASGIApp, counter: LimitCounter, operations: Operations, scale: float):
        self.app = app
        self.counter = counter
        self.limits = {op.id: scaled(op.rate_limit, scale) for op in operations if op.rate_limit}
        self.attempt_limits = declared_attempt_limits(operations, scale)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        operation = operation_of(scope) if scope["type"] == "http" else None
        if operation is not None:
            await self._count(scope, operation)
            if operation.id in self.attempt_limits:
                open_gate(scope, self.counter, operation.id, self.attempt_limits[operation.id])
        await self.app(scope, receive, send)

    async def _count(self, scope: Scope, operation: Operation) -> None:
        limit = self.limits.get(operation.id)
        if limit is not None:
            usage = await self.counter.hit(limit, operation.id, caller_of(scope))
            if usage is not None:
                if usage.exceeded:
                    metrics.RATE_LIMITED.labels(operation.id, "client").inc()
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
    requests carrying credentials are refused with 429 before they are checked, until the window
    ends. The block is remembered in this process: a request costs a storage call only if it
    fails."""

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
        """How many addresses this process remembers blocking (expired blocks included)."""
        return len(self._blocked)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _presents_credentials(scope):
            await self.app(scope, receive, send)
            return
        address = client_address(scope)
        self._refuse_if_blocked(scope, address)
        status = None

        async def send_noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_noting_status)
        except ProblemException as error:  # 401s from security are raised, not sent
            if error.status == 401:
                await self._count_failure(address)
            raise
        if status == 401:  # a handler's refusal, such as the token endpoint's invalid_client
            await self._count_failure(address)

    def _refuse_if_blocked(self, scope: Scope, address: str) -> None:
        blocked = self._blocked.get(address)
        if blocked is None:
            return
        until, usage = blocked
        remaining = until - time.monotonic()
        if remaining <= 0:
            del self._blocked[address]
            return
        operation = operation_of(scope)
        metrics.RATE_LIMITED.labels(
            operation.id if operation else metrics.NO_OPERATION, "failed_auth"
        ).inc()
        usage = dataclasses.replace(usage, reset_after=math.ceil(remaining))
        raise TooManyRequests(
            usage,
            f"Too many failed authentication attempts from this address; try again in "
            f"{usage.reset_after} seconds.",
        )

    async def _count_failure(self, address: str) -> None:
        usage = await self.counter.hit(self.limit, "failed-auth", address)
        if usage is not None and usage.count >= self.limit.amount:
            if len(self._blocked) >= MAX_BLOCKED_ADDRESSES:
                now = time.monotonic()
                current = [(a, b) for a, b in self._blocked.items() if b[0] > now]
                self._blocked = dict(current[max(0, len(current) - MAX_BLOCKED_ADDRESSES // 2) :])
            self._blocked[address] = (time.monotonic() + usage.reset_after, usage)
