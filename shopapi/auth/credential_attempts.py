"""Attempts at an account's credentials that its limits count (a wrong password, an email that
belongs to another user): the handler names the account as it makes the attempt. Here, so that
handlers and the token endpoint reach it from auth/; the counting is the pipeline's
(shopapi/pipeline/account_limits.py), which opens the request's gate. Design: docs/pipeline.md."""

import contextlib
from collections.abc import Iterator

import connexion


class Attempt:
    has_failed = False

    def failed(self) -> None:
        """The attempt failed (a wrong password, a taken email): it stays counted."""
        self.has_failed = True


@contextlib.contextmanager
def limited_attempt(account: str) -> Iterator[Attempt]:
    """For a handler: an attempt on `account` (`user:<id>`, or `email:<email>` that no user
    has), limited as the request's operation declares; 429 (TooManyRequests) when the account
    is over a limit. Call `failed()` on it when the attempt fails; otherwise it does not count.
    Without a declared limit (or a store), the attempt is simply made."""
    try:
        gate = connexion.context.scope.get("state", {}).get("attempt_limit")
    except RuntimeError:  # outside a request: nothing to count against
        gate = None
    if gate is None:
        yield Attempt()
        return
    with gate.attempt(account) as attempt:
        yield attempt
