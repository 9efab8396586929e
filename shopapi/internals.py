"""Every place the service relies on a library's private API, and nowhere else: each is held by
tests/test_internals.py, which fails when a new release of the library changes it."""

import time

from playhouse.pool import PooledPostgresqlDatabase
from starlette.types import ASGIApp, Scope

# Connexion is imported where it is used: models/ (the pool below) stays free of it.


def replace_flask_bridge(app, bridge: ASGIApp) -> None:
    """Serve `app`'s Flask through `bridge` instead of Connexion's a2wsgi: FlaskApp has no
    option for it, and its inner ASGI app is where the bridge sits."""
    app._middleware_app.asgi_app = bridge


def check_specs_with(check) -> None:
    """Have Connexion check each spec it loads against the OpenAPI schema through
    `check(spec, validate)`, `validate` being its own check: Connexion has no option for it, and
    its Specification's private `_validate_spec` is where the check runs."""
    from connexion.spec import Specification

    validate = _CONNEXION_VALIDATE.setdefault("validate", Specification._validate_spec.__func__)
    Specification._validate_spec = classmethod(
        lambda cls, spec: check(spec, lambda checked: validate(cls, checked))
    )


# Connexion's own check, kept on the first replacement so that replacing it again (each app a
# process builds) wraps the original, not the previous wrapper.
_CONNEXION_VALIDATE: dict = {}


def accepts_kwarg(func, keyword: str) -> bool:
    """Whether Connexion passes `keyword` to a security check function (it reads the function's
    signature to decide)."""
    from connexion.security import AbstractSecurityHandler

    return AbstractSecurityHandler._accepts_kwarg(func, keyword)


def sanitized(name: str) -> str:
    """The Python argument name Connexion gives a query parameter (`price_cents[gte]`)."""
    from connexion.decorators.parameter import sanitized

    return sanitized(name)


def share_request_notes(scope: Scope) -> None:
    """Make the dicts in which Connexion's router and security note what they found part of
    this scope, so that a layer outside them reads the notes once they have run: the router
    passes a copy of the scope inwards, which shares these dicts only if they exist already."""
    scope.setdefault("extensions", {})
    scope.setdefault("state", {})


def routed_to(scope: Scope) -> tuple[str | None, str | None]:
    """The API base path (`/v1`) and handler (its dotted path) Connexion's router matched."""
    routing = scope.get("extensions", {}).get("connexion_routing", {})
    return routing.get("api_base_path"), routing.get("operation_id")


def token_info(scope: Scope) -> dict | None:
    """The claims of the credentials Connexion's security accepted, if any."""
    return scope.get("extensions", {}).get("connexion_context", {}).get("token_info")


class IdleCheckedPool(PooledPostgresqlDatabase):
    """Peewee's pool, checking a connection with a round trip only after it sat idle longer
    than `check_idle_after` seconds; a connection returned more recently is checked locally (the
    driver's own state: closed, or its transaction status unknown after an error)."""

    def __init__(self, *args, check_idle_after: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.check_idle_after = check_idle_after
        self._returned_at: dict[int, float] = {}

    def _can_reuse(self, conn):
        reusable = super()._can_reuse(conn)
        if reusable:
            self._returned_at[self.conn_key(conn)] = time.monotonic()
        return reusable

    @property
    def returns_remembered(self) -> int:
        """How many connections' last return the pool remembers: at most one per pooled one."""
        return len(self._returned_at)

    def _close_raw(self, conn):
        # Every way Peewee closes a connection ends here: a closed one's return is forgotten, or
        # one entry would stay per connection closed idle (after each database outage).
        self._returned_at.pop(self.conn_key(conn), None)
        super()._close_raw(conn)

    def _is_closed(self, conn):
        returned_at = self._returned_at.pop(self.conn_key(conn), None)
        recently_used = (
            returned_at is not None and time.monotonic() - returned_at < self.check_idle_after
        )
        status = self._adapter.txn_status(conn)
        if recently_used and not conn.closed and status == self._adapter.txn_idle:
            return False
        return super()._is_closed(conn)
