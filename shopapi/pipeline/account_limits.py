"""Failed attempts per account (`x-rate-limit-failed-login-per-account`, ...): the handler names
the account as it makes the attempt (`limited_attempt`, shopapi/auth/credential_attempts.py), so
the count is of exactly what it checks, wherever the requests come from. Design:
docs/pipeline.md."""

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import functools
import hashlib
import logging
from collections.abc import Iterator

import limits
from starlette.types import Scope

from shopapi.auth.credential_attempts import Attempt
from shopapi.contract.operations import Operations
from shopapi.pipeline.address_groups import address_group
from shopapi.pipeline.limit_counter import LimitCounter, TooManyRequests, Usage, scaled_each
from shopapi.pipeline.request_facts import client_address
from shopapi.telemetry import metrics

log = logging.getLogger("shopapi.rate_limits")

# A handler thread waits this long for the event loop to count an attempt, else goes on unlimited.
ATTEMPT_COUNT_TIMEOUT = 2.0
# An address an account was logged in to from is known to it this long after that login.
KNOWN_ADDRESS_SECONDS = 30 * 24 * 3600


@dataclasses.dataclass(frozen=True)
class AttemptKind:
    """What one kind of attempt limit counts, and what its 429 says."""

    # Its label in http_rate_limited_total.
    label: str
    detail: str
    # Counted per account and client address; else per account, from every address.
    per_address: bool = False
    # Not counted for an address the account was logged in to from lately (known): others'
    # failures never hold back the owner there (OWASP's Authentication Cheat Sheet, NIST SP
    # 800-63B 5.2.2).
    spares_known_addresses: bool = False


# The kinds the contract may declare (x-rate-limit-<kind>, shopapi/contract/operations.py).
ATTEMPT_KINDS = {
    "failed-login-per-account-and-address": AttemptKind(
        "failed_login",
        "Too many wrong passwords for this account from this address; logging in to it from "
        "here is paused",
        per_address=True,
    ),
    "failed-login-per-account": AttemptKind(
        "failed_login",
        "Too many wrong passwords for this account from addresses it has not been logged in to "
        "from; logging in to it from here is paused",
        spares_known_addresses=True,
    ),
    "email-taken-per-user": AttemptKind(
        "email_taken",
        "Too many emails tried that belong to other users; changing this email is paused",
    ),
}


@dataclasses.dataclass(frozen=True)
class AttemptLimit:
    """One window of an attempt limit an operation declares."""

    name: str  # its kind's name, as declared: failed-login-per-account
    kind: AttemptKind
    limit: limits.RateLimitItem


def declared_attempt_limits(operations: Operations, scale: float) -> dict[str, list[AttemptLimit]]:
    """Each operation's attempt limits, by operation id: one per kind and window, scaled."""
    return {
        op.id: [
            AttemptLimit(name, ATTEMPT_KINDS[name], limit)
            for name, windows in op.attempt_limits
            for limit in scaled_each(windows, scale)
        ]
        for op in operations
        if op.attempt_limits
    }


def open_gate(
    scope: Scope, counter: LimitCounter, operation_id: str, declared: list[AttemptLimit]
) -> None:
    """Give the handler of this request the way to the counter (`limited_attempt`): the count
    lives on the event loop, the handler runs on a thread."""
    state = scope["state"]
    state["attempt_limit"] = AttemptGate(
        counter,
        declared,
        operation_id,
        client_address(scope),
        asyncio.get_running_loop(),
        state,
    )


def _digest(*parts: str) -> str:
    # Neither the account's name (an email) nor the address is kept in the store, only this.
    text = "\0".join(parts)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclasses.dataclass(frozen=True)
class _Hit:
    declared: AttemptLimit
    key: str
    usage: Usage


@dataclasses.dataclass
class AttemptGate:
    counter: LimitCounter
    declared: list[AttemptLimit]
    operation_id: str
    address: str
    loop: asyncio.AbstractEventLoop
    state: dict

    @functools.cached_property
    def _client(self) -> str:
        return address_group(self.address)

    @functools.cached_property
    def _spares_known_addresses(self) -> bool:
        return any(declared.kind.spares_known_addresses for declared in self.declared)

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
    def attempt(self, account: str) -> Iterator[Attempt]:
        # Counted before it is made, given back unless it fails: concurrent attempts on any
        # worker or host cannot slip past the limit.
        hits = self._on_loop(self._count(account)) or []
        refused = [hit for hit in hits if hit.usage.exceeded]
        if refused:
            self._on_loop(self._give_back(hits))
            # The window that holds the attempt back longest says when to come back.
            hit = max(refused, key=lambda hit: hit.usage.reset_after)
            metrics.RATE_LIMITED.labels(self.operation_id, hit.declared.kind.label).inc()
            # This answer's RateLimit-* headers are the account's, not the client's quota's.
            self.state.pop("rate_limit", None)
            detail = hit.declared.kind.detail
            raise TooManyRequests(
                hit.usage, f"{detail}; try again in {hit.usage.reset_after} seconds."
            )
        attempt = Attempt()
        try:
            yield attempt
        except BaseException:
            if not attempt.has_failed:  # broken off (the database, say): neither way
                self._on_loop(self._give_back(hits))
            raise
        if not attempt.has_failed:
            self._on_loop(self._succeeded(account, hits))

    def _known_key(self, account: str) -> str:
        return f"known-address/{_digest(account, self._client)}"

    def _key(self, declared: AttemptLimit, account: str) -> str:
        if declared.kind.per_address:
            return _digest(account, self._client)
        return _digest(account)

    async def _count(self, account: str) -> list[_Hit]:
        known = self._spares_known_addresses and await self.counter.remembers(
            self._known_key(account)
        )
        hits = []
        for declared in self.declared:
            if known and declared.kind.spares_known_addresses:
                continue
            key = self._key(declared, account)
            usage = await self.counter.hit(declared.limit, declared.name, key)
            if usage is not None:  # else the store failed: the attempt goes on unlimited
                hits.append(_Hit(declared, key, usage))
        return hits

    async def _give_back(self, hits: list[_Hit]) -> None:
        for hit in hits:
            await self.counter.refund(hit.declared.limit, hit.declared.name, hit.key)

    async def _succeeded(self, account: str, hits: list[_Hit]) -> None:
        """The attempt did not fail: it does not count, and a login from this address forgets
        the address's failures (NIST SP 800-63B 5.2.2) and makes it known to the account."""
        for hit in hits:
            if hit.declared.kind.per_address:
                await self.counter.clear(hit.declared.limit, hit.declared.name, hit.key)
            else:
                await self.counter.refund(hit.declared.limit, hit.declared.name, hit.key)
        if self._spares_known_addresses:
            await self.counter.remember(self._known_key(account), KNOWN_ADDRESS_SECONDS)
