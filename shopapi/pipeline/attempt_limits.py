"""Failed attempts per account (`x-rate-limit-failed-login-per-account`, ...): the handler names
the account as it makes the attempt (`limited_attempt`), so the count is of exactly what it
checks, wherever the requests come from. Design: docs/pipeline.md."""

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import logging
from collections.abc import Iterator

import connexion
import limits
from starlette.types import ASGIApp, Receive, Scope, Send

from shopapi.contract.operations import Operations
from shopapi.pipeline.limit_counter import LimitCounter, TooManyRequests, scaled
from shopapi.pipeline.request_facts import operation_of
from shopapi.telemetry import metrics

log = logging.getLogger("shopapi.rate_limits")

# A handler thread waits this long for the event loop to count an attempt, else goes on unlimited.
ATTEMPT_COUNT_TIMEOUT = 2.0


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
    """Hands the handler of an operation that declares an attempt limit the way to the counter:
    the count lives on the event loop, the handler runs on a thread."""

    def __init__(self, app: ASGIApp, counter: LimitCounter, operations: Operations, scale: float):
        self.app = app
        self.counter = counter
        self.limits = {
            op.id: (op.attempt_limit[0], scaled(op.attempt_limit[1], scale))
            for op in operations
            if op.attempt_limit
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        operation = operation_of(scope)
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
        # Counted before it is made, given back unless it fails: concurrent attempts on any
        # worker or host cannot slip past the limit.
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
