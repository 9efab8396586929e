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
from starlette.types import Scope

from shopapi.contract.operations import Operations
from shopapi.pipeline.limit_counter import LimitCounter, TooManyRequests, scaled
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


def declared_attempt_limits(
    operations: Operations, scale: float
) -> dict[str, tuple[str, limits.RateLimitItem]]:
    """Each operation's attempt limit, by operation id: its kind and its (scaled) limit."""
    return {
        op.id: (op.attempt_limit[0], scaled(op.attempt_limit[1], scale))
        for op in operations
        if op.attempt_limit
    }


def open_gate(
    scope: Scope,
    counter: LimitCounter,
    operation_id: str,
    declared: tuple[str, limits.RateLimitItem],
) -> None:
    """Give the handler of this request the way to the counter (`limited_attempt`): the count
    lives on the event loop, the handler runs on a thread."""
    kind, limit = declared
    state = scope["state"]
    state["attempt_limit"] = AttemptGate(
        counter, kind, limit, operation_id, asyncio.get_running_loop(), state
    )


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
