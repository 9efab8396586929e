"""The database: chosen from DATABASE_URL and bound to every model through one proxy.

Peewee keeps one connection per thread; the app opens it lazily on the first query of a request
and hands it back (to the pool, on PostgreSQL) when the request ends.
"""

import pathlib
from urllib.parse import unquote, urlsplit

import peewee
from playhouse.pool import PooledPostgresqlDatabase

database = peewee.DatabaseProxy()


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
    return PooledPostgresqlDatabase(
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
