"""The database: chosen from DATABASE_URL and bound to every model through one proxy.

Peewee keeps one connection per thread; the app opens it lazily on the first query of a request
and hands it back (to the pool, on PostgreSQL) when the request ends.
"""

import pathlib
from urllib.parse import unquote, urlsplit

import peewee

from models.bounds import UNBOUNDED, BoundedPool, Bounds
from models.routing import RoutingDatabase, current_route, finish

# The primary, or a replica for the reads of a request sent to one (models/routing.py).
database = RoutingDatabase()

# A pooled connection idle longer than this is checked with a round trip before it is used again
# (Peewee checks every one, one more round trip per request; pools commonly check idle ones only).
# A server that went away within that second fails the request that next uses the connection
# with a 503, and close_connection() then drops the idle ones.
CHECK_IDLE_AFTER_SECONDS = 1.0


def open_database(
    url: str, pool_size: int = 10, pool_wait_seconds: float = 10, bounds: Bounds = UNBOUNDED
) -> peewee.Database:
    """A database for `sqlite:///relative/or//absolute/path.db` or `postgresql://...`, its
    PostgreSQL sessions bounded by `bounds` (none by default; the service's are
    `Bounds.configured(settings)`)."""
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
    return BoundedPool(
        **postgresql_arguments(url),
        bounds=bounds,
        max_connections=pool_size,
        stale_timeout=300,
        timeout=pool_wait_seconds,  # to wait for a free pooled connection (Peewee's 0: for ever)
        connect_timeout=3,  # a database that is down answers 503 quickly, not after minutes
        check_idle_after=CHECK_IDLE_AFTER_SECONDS,
    )


def postgresql_arguments(url: str) -> dict:
    """What Peewee's PostgreSQL databases take for `postgresql://user:password@host:port/name`."""
    parts = urlsplit(url)
    return {
        "database": unquote(parts.path.lstrip("/")),
        "user": unquote(parts.username) if parts.username else None,
        "password": unquote(parts.password) if parts.password else None,
        "host": parts.hostname,
        "port": parts.port,
    }


class DatabaseSetupError(Exception):
    """The database cannot be used as configured; the message says what to do, in one line."""


def create_database_if_missing(url: str, variable: str = "DATABASE_URL") -> bool:
    """Create the PostgreSQL database `url` names when it does not exist, connected to the
    server's `postgres` database as `url`'s user; whether it was created. DatabaseSetupError,
    naming the command to run, when it cannot be reached or created; its message calls the URL
    by the environment `variable` that gave it."""
    parts = urlsplit(url)
    name = unquote(parts.path.lstrip("/"))
    if not name:
        raise DatabaseSetupError(f"{variable} names no database (postgresql://user@host/name)")

    def connection_to(database_name: str) -> peewee.PostgresqlDatabase:
        return peewee.PostgresqlDatabase(
            database_name,
            user=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            host=parts.hostname,
            port=parts.port,
            connect_timeout=3,
        )

    def exists() -> bool:
        try:
            with connection_to(name).connection_context():
                return True
        except peewee.OperationalError as error:
            if f'database "{name}" does not exist' in str(error):
                return False
            reason = error_summary(error)
            raise DatabaseSetupError(f"cannot connect to {variable}: {reason}") from None

    if exists():
        return False
    server = connection_to("postgres")
    try:
        with server.connection_context():
            server.execute_sql(f'CREATE DATABASE "{name.replace(chr(34), chr(34) * 2)}"')
            return True
    except peewee.DatabaseError as error:
        if exists():  # created meanwhile by another process (two test runs starting at once)
            return False
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
    """End this thread's connections (returning them to their pools), if a request opened any.

    After a lost connection the idle pooled connections are dropped too: they were opened before
    the outage and each would fail one more request before the pool noticed.
    """
    primary = database.obj
    if primary is None:
        return
    route = current_route.get()
    if route is not None:
        finish(route, primary)
    if not primary.is_closed():
        primary.close()
    if isinstance(error, peewee.OperationalError | peewee.InterfaceError) and hasattr(
        primary, "close_idle"
    ):
        primary.close_idle()
