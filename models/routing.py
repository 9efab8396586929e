"""Which database a query goes to: the primary, unless the request running it was sent to a
replica (shopapi/pipeline/read_routing.py) and has written nothing yet. The rules and why:
docs/database.md."""

import contextlib
import contextvars
import re

import peewee

# The primary's WAL position, in bytes, as a number that a replica's replay position compares to:
# where it inserts, which is past every commit record so far, even those that synchronous_commit
# off has not written out yet (pg_current_wal_lsn() can be behind them).
WAL_POSITION = "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint"


class Route:
    """Where one request's queries go, kept in `current_route` (a context variable, which the
    request's Flask thread sees): its replica until it writes or the replica fails, then the
    primary for the rest of the request."""

    __slots__ = ("chosen", "failure", "replica", "written_at", "wrote")

    def __init__(self, replica: peewee.Database | None = None):
        self.chosen = replica  # the replica the request was sent to
        self.replica = replica  # where its reads go now: None once they go to the primary
        self.wrote = False  # whether anything but a SELECT ran on the primary
        self.written_at: int | None = None  # the primary's WAL position after those writes
        self.failure: tuple[peewee.Database, Exception] | None = None  # the replica's error


current_route: contextvars.ContextVar[Route | None] = contextvars.ContextVar(
    "database_route", default=None
)


# A SELECT, or a plan of one that does not run it (`Prefer: count=planned` asks PostgreSQL's
# `EXPLAIN (FORMAT JSON) SELECT ...`; SQLite says `EXPLAIN QUERY PLAN`). EXPLAIN ANALYZE runs it.
_READ = re.compile(r"\s*(EXPLAIN\s+(QUERY\s+PLAN\s+|\((?![^)]*ANALYZE)[^)]*\)\s*)?)?SELECT\b", re.I)


def _is_read(sql: str) -> bool:
    return _READ.match(sql) is not None


class RoutingDatabase(peewee.DatabaseProxy):
    """The database every model is bound to. `obj` is the primary, which everything outside a
    read-routed request uses (the worker, migrations, the security checks, every write). Inside
    one, a SELECT runs on the route's replica, and anything else (a write, a transaction, raw SQL
    that is not a SELECT) moves the request to the primary first. A replica's error is not the
    client's: the query is run again on the primary, which gives the answer."""

    def _target(self) -> peewee.Database:
        route = current_route.get()
        if route is not None and route.replica is not None:
            return route.replica
        return self.obj

    def __getattr__(self, attr):
        if self.obj is None:
            raise AttributeError("Cannot use uninitialized Proxy.")
        return getattr(self._target(), attr)

    def _on_primary(self) -> peewee.Database:
        route = current_route.get()
        if route is not None:
            route.replica = None
            route.wrote = True
        return self.obj

    def execute(self, query, **context_options):
        route = current_route.get()
        if route is not None:
            if not isinstance(query, peewee.SelectBase):
                route.replica, route.wrote = None, True
            elif route.replica is not None:
                return self._read(route, lambda db: db.execute(query, **context_options))
        return self.obj.execute(query, **context_options)

    def execute_sql(self, sql, params=None):
        route = current_route.get()
        if route is not None:
            if not _is_read(sql):
                route.replica, route.wrote = None, True
            elif route.replica is not None:
                return self._read(route, lambda db: db.execute_sql(sql, params))
        return self.obj.execute_sql(sql, params)

    def _read(self, route: Route, run):
        replica = route.replica
        try:
            return run(replica)
        except (peewee.DatabaseError, peewee.InterfaceError) as error:
            # A replica gone away, a query cancelled by a conflict with recovery, or one the
            # primary refuses as well: the primary's answer is the one the client gets.
            route.replica, route.failure = None, (replica, error)
            return run(self.obj)

    # Transactions are the primary's: every read inside one sees what the transaction wrote.
    def atomic(self, *args, **kwargs):
        self._on_primary()
        return super().atomic(*args, **kwargs)

    def transaction(self, *args, **kwargs):
        self._on_primary()
        return super().transaction(*args, **kwargs)

    def manual_commit(self):
        self._on_primary()
        return super().manual_commit()

    def savepoint(self):
        self._on_primary()
        return super().savepoint()


def note_committed_write(primary: peewee.Database) -> None:
    """The request answers for a write committed before it (an Idempotency-Key's replayed
    answer; the host that made the write may have died before noting it for its caller): note
    where the primary's WAL stands now, so that the caller's next reads find the write."""
    route = current_route.get()
    if route is not None and isinstance(primary, peewee.PostgresqlDatabase):
        route.written_at = primary.execute_sql(WAL_POSITION).fetchone()[0]


def finish(route: Route, primary: peewee.Database) -> None:
    """At the end of a request on its thread, before its connections go back to their pools:
    note where the primary's WAL stood after the request's writes (they are committed by now),
    and drop a failed replica's idle connections (opened before it failed, each would fail one
    more request)."""
    if route.wrote and not primary.is_closed() and isinstance(primary, peewee.PostgresqlDatabase):
        # If the primary fails here, it failed under the request: its writes failed with it.
        with contextlib.suppress(peewee.DatabaseError, peewee.InterfaceError):
            route.written_at = primary.execute_sql(WAL_POSITION).fetchone()[0]
    if route.chosen is not None and not route.chosen.is_closed():
        route.chosen.close()
    if route.failure is not None:
        replica, error = route.failure
        if isinstance(error, peewee.OperationalError | peewee.InterfaceError):
            replica.close_idle()
