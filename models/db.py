"""The database: chosen from DATABASE_URL and bound to every model through one proxy.

Peewee keeps one connection per thread; the app opens it lazily on the first query of a request
and hands it back (to the pool, on PostgreSQL) when the request ends.
"""

import pathlib
import time
from urllib.parse import unquote, urlsplit

import peewee
from playhouse.pool import PooledPostgresqlDatabase

database = peewee.DatabaseProxy()

# A pooled connection idle longer than this is checked with a round trip before it is used again.
CHECK_IDLE_AFTER_SECONDS = 1.0


class _PooledPostgresqlDatabase(PooledPostgresqlDatabase):
    """Peewee's pool, checking a connection with a round trip only after it sat idle a while.

    Peewee sends `SELECT 1` every time it hands out a pooled connection: one more round trip on
    every request (under load, a connection is back in use milliseconds after it was returned).
    Here a connection returned less than CHECK_IDLE_AFTER_SECONDS ago is checked locally only
    (the driver's own state: closed, or its transaction status unknown after an error), as
    connection pools commonly do. A server that went away in that second fails the request that
    next uses the connection with a 503, and close_connection() then drops the idle ones.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._returned_at: dict[int, float] = {}

    def _can_reuse(self, conn):
        reusable = super()._can_reuse(conn)
        if reusable:
            self._returned_at[self.conn_key(conn)] = time.monotonic()
        return reusable

    def _is_closed(self, conn):
        returned_at = self._returned_at.pop(self.conn_key(conn), None)
        recently_used = (
            returned_at is not None and time.monotonic() - returned_at < CHECK_IDLE_AFTER_SECONDS
        )
        status = self._adapter.txn_status(conn)
        if recently_used and not conn.closed and status == self._adapter.txn_idle:
            return False
        return super()._is_closed(conn)


def open_database(url: str, pool_size: int = 10) -> peewee.Database:
    """A database for `sqlite:///relative/or//absolute/path.db` or `postgresql://...`."""
    if url.startswith("sqlite:///"):
        path = pathlib.Path(url[len("sqlite:///") :])
        path.parent.mkdir(parents=True, exist_ok=True)
        return peewee.SqliteDatabase(
            str(path),
            # BEGIN IMMEDIATE takes the write lock when a transaction starts, so concurrent
            # writers queue on busy_timeout instead of failing to upgrade a read lock.
            lock_type="IMMEDIATE",
            timeout=10,
            pragmas={"journal_mode": "wal", "foreign_keys": 1, "synchronous": "normal"},
        )
    parts = urlsplit(url)
    return _PooledPostgresqlDatabase(
        unquote(parts.path.lstrip("/")),
        user=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
        host=parts.hostname,
        port=parts.port,
        max_connections=pool_size,
        stale_timeout=300,
        timeout=10,  # seconds to wait for a free pooled connection
        connect_timeout=3,  # a database that is down answers 503 quickly, not after minutes
    )


class DatabaseSetupError(Exception):
    """The database cannot be used as configured; the message says what to do, in one line."""


def create_database_if_missing(url: str) -> bool:
    """Create the PostgreSQL database `url` names when it does not exist, connected to the
    server's `postgres` database as `url`'s user; whether it was created. DatabaseSetupError,
    naming the command to run, when it cannot be reached or created."""
    parts = urlsplit(url)
    name = unquote(parts.path.lstrip("/"))
    if not name:
        raise DatabaseSetupError("DATABASE_URL names no database (postgresql://user@host/name)")

    def connection_to(database_name: str) -> peewee.PostgresqlDatabase:
        return peewee.PostgresqlDatabase(
            database_name,
            user=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            host=parts.hostname,
            port=parts.port,
            connect_timeout=3,
        )

    try:
        with connection_to(name).connection_context():
            return False
    except peewee.OperationalError as error:
        if f'database "{name}" does not exist' not in str(error):
            reason = error_summary(error)
            raise DatabaseSetupError(f"cannot connect to DATABASE_URL: {reason}") from None
    server = connection_to("postgres")
    try:
        with server.connection_context():
            server.execute_sql(f'CREATE DATABASE "{name.replace(chr(34), chr(34) * 2)}"')
            return True
    except peewee.DatabaseError as error:
        host, port = parts.hostname or "localhost", parts.port or 5432
        user = f" -U {unquote(parts.username)}" if parts.username else ""
        raise DatabaseSetupError(
            f"the PostgreSQL database {name!r} does not exist and cannot be created here "
            f"({error_summary(error)}); create it: createdb -h {host} -p {port}{user} {name}"
        ) from None


def error_summary(error: Exception) -> str:
    """The first line of a driver's error: what a person needs, without its context lines."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def use(db: peewee.Database) -> None:
    """Bind every model to `db`."""
    database.initialize(db)


def is_postgresql() -> bool:
    return isinstance(database.obj, peewee.PostgresqlDatabase)


def close_connection(error: BaseException | None = None) -> None:
    """End this thread's connection (returning it to the pool), if a request opened one.

    After a lost connection the idle pooled connections are dropped too: they were opened before
    the outage and each would fail one more request before the pool noticed.
    """
    if database.obj is None:
        return
    if not database.is_closed():
        database.close()
    if isinstance(error, peewee.OperationalError | peewee.InterfaceError) and hasattr(
        database.obj, "close_idle"
    ):
        database.close_idle()
