"""Rate limits as the spec declares them, counted per client with the `limits` engine.

`x-rate-limit: 1000/minute` on an operation, or at the top of a spec for every operation that does
not say, is a fixed window per client and operation; the client is the token's subject or the API
key, else the address. `x-rate-limit-failed-auth` (top of the spec) caps the requests per address
whose credentials are refused, so that guessing tokens or keys is throttled. An operation's
`x-rate-limit-failed-login-per-account` (or `-email-taken-per-user`) caps the failed attempts
on one account, wherever they come from (AttemptLimitMiddleware).

This is ASGI middleware around Connexion's security layer rather than flask-limiter (which runs
on the same `limits` engine): Flask never sees the requests that security or validation refuse,
and those are exactly the failed attempts that must count.

The counts live in memory or in Redis. When Redis fails, requests are served without a limit
(fail open: the API stays up, the failure is logged and counted) and the store is tried again a
second later, so limits resume when it returns.
"""

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import logging
import math
import time
from collections.abc import Iterator

import connexion
import limits
from connexion.exceptions import ProblemException
from limits.aio.storage import Storage
from limits.errors import StorageError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shopapi.auth.security import CREDENTIAL_HEADERS
from shopapi.contract.operations import Operations
from shopapi.pipeline.callers import client_address, client_of
from shopapi.telemetry import metrics

log = logging.getLogger("shopapi.pipeline.rate_limits")

# After a storage failure, requests go unlimited this long before the store is tried again: a
# dead Redis then costs one failed call a second, not one per request.
RETRY_STORAGE_AFTER = 1.0
# Redis must answer within this, or the request goes on without a limit.
REDIS_TIMEOUT = 0.25
# Windows whose end this process remembers; beyond this many the ended ones are dropped.
MAX_WINDOWS_KNOWN = 100_000
# Addresses blocked after failed authentication, kept in this process; beyond this many the
# expired ones are dropped.
MAX_BLOCKED_ADDRESSES = 10_000
# A handler thread waits this long for the event loop to count an attempt, else goes on unlimited.
ATTEMPT_COUNT_TIMEOUT = 2.0


def scaled(limit: str, scale: float) -> limits.RateLimitItem:
    """Parse "1000/minute" and multiply its amount by `scale` (at least 1)."""
    item = limits.parse(limit)
    return type(item)(max(1, round(item.amount * scale)), item.multiples)


@dataclasses.dataclass(frozen=True)
class Usage:
    """A client's use of one limit in its current window."""

    limit: limits.RateLimitItem
    count: int
    reset_after: int  # seconds until the window starts over

    @property
    def exceeded(self) -> bool:
        return self.count > self.limit.amount

    def headers(self) -> dict[str, str]:
        """The `RateLimit-*` headers (draft-ietf-httpapi-ratelimit-headers)."""
        return {
            "RateLimit-Limit": str(self.limit.amount),
            "RateLimit-Remaining": str(max(0, self.limit.amount - self.count)),
            "RateLimit-Reset": str(self.reset_after),
            "RateLimit-Policy": f"{self.limit.amount};w={self.limit.get_expiry()}",
        }


class TooManyRequests(ProblemException):
    def __init__(self, usage: Usage, detail: str):
        super().__init__(
            status=429,
            title="Too Many Requests",
            detail=detail,
            headers={"Retry-After": str(max(1, usage.reset_after)), **usage.headers()},
        )


def _storage(uri: str) -> Storage:
    if uri.startswith("memory"):
        return limits.storage.storage_from_string("async+memory://")
    return limits.storage.storage_from_string(
        f"async+{uri}",
        implementation="redispy",
        key_prefix="shopapi",
        wrap_exceptions=True,
        socket_timeout=REDIS_TIMEOUT,
        socket_connect_timeout=REDIS_TIMEOUT,
        # redis-py retries a failed command with backoff by default; a limit is not worth the
        # wait: fail open at once.
        retry_on_error=[],
        retry=None,
    )


class LimitCounter:
    """Counts hits in the storage, failing open."""

    def __init__(self, storage_uri: str):
        self.storage = _storage(storage_uri)
        self._unavailable_until = 0.0
        # When each key's current window ends (wall clock), as far as this process knows: the
        # storage is asked only for windows this process has not seen start.
        self._window_ends: dict[str, float] = {}

    async def hit(self, limit: limits.RateLimitItem, *identifiers: str) -> Usage | None:
        """Count one hit; None when the storage is unavailable."""
        if time.monotonic() < self._unavailable_until:
            metrics.RATE_LIMIT_STORAGE_ERRORS.inc()
            return None
        key = limit.key_for(*identifiers)
        try:
            count = await self.storage.incr(key, limit.get_expiry())
            reset_at = await self._window_end(key, count, limit)
        except StorageError as error:
            self._unavailable_until = time.monotonic() + RETRY_STORAGE_AFTER
            metrics.RATE_LIMIT_STORAGE_ERRORS.inc()
            log.warning(
                "rate limit storage unavailable, serving without limits: %s", error.storage_error
            )
            return None
        return Usage(limit, count, max(0, math.ceil(reset_at - time.time())))

    async def refund(self, limit: limits.RateLimitItem, *identifiers: str) -> None:
        """Take back one hit counted in the current window (nothing when the store fails)."""
        if time.monotonic() < self._unavailable_until:
            return
        try:
            await self.storage.incr(limit.key_for(*identifiers), limit.get_expiry(), -1)
        except StorageError as error:
            self._unavailable_until = time.monotonic() + RETRY_STORAGE_AFTER
            metrics.RATE_LIMIT_STORAGE_ERRORS.inc()
            log.warning("rate limit storage unavailable: %s", error.storage_error)

    async def _window_end(self, key: str, count: int, limit: limits.RateLimitItem) -> float:
        """When the window that `count` fell in ends. The first hit opens a window here; a window
        opened elsewhere (another worker or host) costs one more storage call, once."""
        now = time.time()
        if count == 1:
            end = now + limit.get_expiry()
        else:
            end = self._window_ends.get(key, 0.0)
            if end <= now:
                end = await self.storage.get_expiry(key)
        if len(self._window_ends) >= MAX_WINDOWS_KNOWN:
            current = {k: e for k, e in self._window_ends.items() if e > now}
            self._window_ends = current if len(current) < MAX_WINDOWS_KNOWN // 2 else {}
        self._window_ends[key] = end
        return end


class RateLimitMiddleware:
    """Each operation's limit per client. Runs after the security checks, so the client is known;
    the usage goes into the scope's state for RateLimitHeadersMiddleware to put on the response,
    whichever layer makes it."""

    def __init__(self, app: ASGIApp, counter: LimitCounter, operations: Operations, scale: float):
        self.app = app
        self.counter = counter
        self.operations = operations
        self.limits = {op.id: scaled(op.rate_limit, scale) for op in operations if op.rate_limit}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        operation = self.operations.of(scope)
        limit = self.limits.get(operation.id) if operation else None
        if scope["type"] == "http" and limit is not None:
            usage = await self.counter.hit(limit, operation.id, client_of(scope))
            if usage is not None:
                if usage.exceeded:
                    metrics.RATE_LIMITED.labels(operation.id, "client").inc()
                    raise TooManyRequests(
                        usage,
                        f"This client may call this operation {limit.amount} times every "
                        f"{limit.get_expiry()} seconds; try again in {usage.reset_after} seconds.",
                    )
                scope["state"]["rate_limit"] = usage
        await self.app(scope, receive, send)


def _presents_credentials(scope: Scope) -> bool:
    return any(name.decode() in CREDENTIAL_HEADERS for name, _ in scope["headers"])


class FailedAuthMiddleware:
    """Counts refused credentials (401) per address; once an address is over its limit, its
    requests carrying credentials are refused with 429 before they are checked, until the window
    ends.

    The block is remembered in this process when the count that crossed the limit comes back, so
    a request with credentials costs no storage call unless it fails. Each other worker lets at
    most one more guess through before it learns of the block the same way.
    """

    def __init__(
        self,
        app: ASGIApp,
        counter: LimitCounter,
        operations: Operations,
        limit: limits.RateLimitItem,
    ):
        self.app = app
        self.counter = counter
        self.operations = operations
        self.limit = limit
        self._blocked: dict[str, tuple[float, Usage]] = {}

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
        operation = self.operations.of(scope)
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
                self._blocked = {a: b for a, b in self._blocked.items() if b[0] > now}
            self._blocked[address] = (time.monotonic() + usage.reset_after, usage)


# What an attempt limit's 429 says, and the label it counts under in http_rate_limited_total.
_ATTEMPT_REFUSALS = {
    "failed-login-per-account": (
        "failed_login",
        "Too many wrong passwords for this account; logging in to it is paused",
    ),
    "email-taken-per-user": (
        "email_taken",
        "Too many emails tried that belong to other users; changing this email is paused",
    ),
}


class AttemptLimitMiddleware:
    """Failed attempts per account, for the operations whose spec declares such a limit
    (`x-rate-limit-failed-login-per-account: 10/15 minutes` on the token endpoint): the handler
    names the account as it makes the attempt (`limited_attempt`), so the count is of exactly
    what it checks, wherever the requests come from.

    Each attempt is counted before it is made and the count given back unless it fails, so
    concurrent attempts on any worker or host cannot slip past the limit; over it, the attempt
    is not made and the answer is 429 with Retry-After until the window ends. This middleware
    only hands the handler the way to the counter (the count lives on the event loop; the
    handler runs on a thread)."""

    def __init__(self, app: ASGIApp, counter: LimitCounter, operations: Operations, scale: float):
        self.app = app
        self.counter = counter
        self.operations = operations
        self.limits = {
            op.id: (op.attempt_limit[0], scaled(op.attempt_limit[1], scale))
            for op in operations
            if op.attempt_limit
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        operation = self.operations.of(scope)
        declared = self.limits.get(operation.id) if operation else None
        if scope["type"] == "http" and declared is not None:
            kind, limit = declared
            state = scope.setdefault("state", {})
            state["attempt_limit"] = AttemptGate(
                self.counter, kind, limit, operation.id, asyncio.get_running_loop(), state
            )
        await self.app(scope, receive, send)


@dataclasses.dataclass
class AttemptGate:
    counter: LimitCounter
    kind: str
    limit: limits.RateLimitItem
    operation_id: str
    loop: asyncio.AbstractEventLoop
    state: dict

    def _on_loop(self, coroutine):
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(ATTEMPT_COUNT_TIMEOUT)
        except concurrent.futures.TimeoutError:
            future.cancel()
            metrics.RATE_LIMIT_STORAGE_ERRORS.inc()
            log.warning("an attempt was not counted in time: served without its limit")
            return None

    @contextlib.contextmanager
    def attempt(self, account: str) -> Iterator["Attempt"]:
        # The account's name is not kept in the store (an email, in Redis), only its digest.
        key = hashlib.sha256(account.encode("utf-8", "surrogatepass")).hexdigest()
        usage = self._on_loop(self.counter.hit(self.limit, self.kind, key))
        if usage is not None and usage.exceeded:
            label, detail = _ATTEMPT_REFUSALS[self.kind]
            metrics.RATE_LIMITED.labels(self.operation_id, label).inc()
            # This answer's RateLimit-* headers are the account's, not the client's quota's.
            self.state.pop("rate_limit", None)
            raise TooManyRequests(usage, f"{detail}; try again in {usage.reset_after} seconds.")
        attempt = Attempt()
        try:
            yield attempt
        finally:
            if usage is not None and not attempt.has_failed:
                self._on_loop(self.counter.refund(self.limit, self.kind, key))


class Attempt:
    has_failed = False

    def failed(self) -> None:
        """The attempt failed (a wrong password, a taken email): it stays counted."""
        self.has_failed = True


@contextlib.contextmanager
def limited_attempt(account: str) -> Iterator[Attempt]:
    """For a handler: an attempt on `account` (a normalised email, a user id), limited as the
    request's operation declares; 429 (TooManyRequests) when the account is over the limit.
    Call `failed()` on it when the attempt fails; otherwise it does not count. Without a
    declared limit (or a store), the attempt is simply made."""
    try:
        gate = connexion.context.scope.get("state", {}).get("attempt_limit")
    except RuntimeError:  # outside a request: nothing to count against
        gate = None
    if gate is None:
        yield Attempt()
        return
    with gate.attempt(account) as attempt:
        yield attempt


class RateLimitHeadersMiddleware:
    """Puts the `RateLimit-*` headers of the request's usage on its response. It sits outside
    Connexion's exception handling, so error responses made there (a 400 from validation, a 404)
    carry them too."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})

        async def send_with_headers(message: Message) -> None:
            usage = state.get("rate_limit")
            if message["type"] == "http.response.start" and usage is not None:
                extra = [(k.lower().encode(), v.encode()) for k, v in usage.headers().items()]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)
