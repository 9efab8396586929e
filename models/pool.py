"""The PostgreSQL connection pool: Peewee's, checking a connection with a round trip only when
it sat idle. Design: docs/architecture.md."""

import time

from shopapi.internals.peewee import HookedPostgresqlPool


class IdleCheckedPool(HookedPostgresqlPool):
    """Peewee's pool, checking a connection with a round trip only after it sat idle longer
    than `check_idle_after` seconds; a connection returned more recently is checked locally (the
    driver's own state: closed, or its transaction status unknown after an error)."""

    def __init__(self, *args, check_idle_after: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.check_idle_after = check_idle_after
        self._returned_at: dict[int, float] = {}

    def returned(self, conn) -> None:
        self._returned_at[self.conn_key(conn)] = time.monotonic()

    @property
    def returns_remembered(self) -> int:
        """How many connections' last return the pool remembers: at most one per pooled one."""
        return len(self._returned_at)

    def closing(self, conn) -> None:
        # Every way Peewee closes a connection ends here: a closed one's return is forgotten, or
        # one entry would stay per connection closed idle (after each database outage).
        self._returned_at.pop(self.conn_key(conn), None)

    def known_open(self, conn) -> bool:
        returned_at = self._returned_at.pop(self.conn_key(conn), None)
        recently_used = (
            returned_at is not None and time.monotonic() - returned_at < self.check_idle_after
        )
        return recently_used and not conn.closed and self.idle_outside_transactions(conn)
