"""Peewee's private API, each use held by tests/test_internals.py (TestPeewee).

A list's page and `get_by_id` run from SQL rendered once (shopapi/web/listing.py,
models/base.py), and their rows become what the query itself would make of them: `rows_of`.
A list's count runs from the same SQL, its ORDER BY cut off: `without_order_by`.

Peewee's pool documents its options (max_connections, stale_timeout, timeout), not the steps
by which it checks and reuses a connection: models/pool.py changes when a connection is
checked with a round trip, through the hooks below."""

import peewee
from playhouse.pool import PooledPostgresqlDatabase


class HookedPostgresqlPool(PooledPostgresqlDatabase):
    """Peewee's PostgreSQL pool, its private steps given public names: `returned(conn)` after a
    connection went back to the pool reusable (its `_can_reuse`), `closing(conn)` as Peewee
    closes one (`_close_raw`, every way it closes one), `known_open(conn)` before Peewee checks
    one it is about to reuse (`_is_closed`): True skips its check; `pooled_connection()`, a
    pooled connection or a new one made with `connect_params` (`_connect`), which an override
    calls through `super()`."""

    def pooled_connection(self):
        return super()._connect()

    def _connect(self):
        return self.pooled_connection()

    def returned(self, conn) -> None:
        pass

    def closing(self, conn) -> None:
        pass

    def known_open(self, conn) -> bool:
        return False

    def idle_outside_transactions(self, conn) -> bool:
        """Whether the driver says `conn` is in no transaction and not in error (through the
        pool's private `_adapter`)."""
        return self._adapter.txn_status(conn) == self._adapter.txn_idle

    def _can_reuse(self, conn):
        reusable = super()._can_reuse(conn)
        if reusable:
            self.returned(conn)
        return reusable

    def _close_raw(self, conn):
        self.closing(conn)
        super()._close_raw(conn)

    def _is_closed(self, conn):
        if self.known_open(conn):
            return False
        return super()._is_closed(conn)


def rows_of(query: peewee.ModelSelect, cursor) -> list:
    """The rows of `cursor`, which ran `query`'s SQL, as `query` would give them: its models,
    with its columns' conversions (Peewee's `_get_cursor_wrapper`)."""
    return list(query._get_cursor_wrapper(cursor))


def without_order_by(statement: tuple[str, list], param: str) -> tuple[str, list]:
    """A query's rendered `statement` (SQL and parameters) as the same query unordered would
    render: Peewee writes ORDER BY after everything but LIMIT and OFFSET, so a statement without
    those ends with it, and the parameters its terms took (`param` each) are the last ones."""
    sql, params = statement
    head, found, order = sql.rpartition(" ORDER BY ")
    if not found:
        return statement
    taken = order.count(param)
    return head, list(params[: len(params) - taken])


# What the above relies on of Peewee's insides, checked against the installed release by
# tests/test_internals.py: (owner, name, the parameters it takes, or None for an attribute).
RELIED_UPON = [
    (PooledPostgresqlDatabase, "_connect", ["self"]),
    (PooledPostgresqlDatabase, "_can_reuse", ["self", "conn"]),
    (PooledPostgresqlDatabase, "_is_closed", ["self", "conn"]),
    (PooledPostgresqlDatabase, "_close_raw", ["self", "conn"]),
    (PooledPostgresqlDatabase, "_adapter", None),
    (PooledPostgresqlDatabase, "conn_key", None),  # undocumented, used by models/pool.py
    (peewee.BaseQuery, "_get_cursor_wrapper", ["self", "cursor"]),
]
