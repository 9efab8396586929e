"""Versioned schema migrations.

Each module `mNNNN_name.py` here has `up(db)`; `migrate(db)` applies, in order, those not yet
recorded in `schema_migrations`, each in its own transaction. A migration describes the schema as
it was when written (it never imports the models), so old migrations keep meaning what they did.
Run with `python -m models.migrations` (uses DATABASE_URL).

A migration that rebuilds SQLite tables says `REBUILDS_TABLES = True`: SQLite's foreign keys are
then off while it runs (they cannot be switched inside a transaction, and with them on, dropping
a table deletes what refers to it), and it checks them itself before committing.

On PostgreSQL a migration runs while the app serves (docs/database.md, "Migrations under load"):
the tables it names in `LOCKS` are locked first (in `LOCK_MODE`, ACCESS EXCLUSIVE by default), in
one statement, in name order; each lock is waited for LOCK_TIMEOUT_SECONDS at most, and a
migration that ran out of time or deadlocked is rolled back and tried again, up to TRIES times.
"""

import contextlib
import importlib
import logging
import pkgutil
import re
import time

import peewee

from models import database_errors
from models.fields import UTCDateTimeField, utc_now

log = logging.getLogger("shopapi.migrations")

_NAME = re.compile(r"m\d{4}_\w+")

# How long a migration waits for its locks, all of them, and for each lock after: below
# PostgreSQL's deadlock_timeout (1 s by default), so that when a migration and the app's
# transactions wait on each other, the migration gives way before any of them is ended; and
# short, because every write to a table the migration holds queues behind its wait.
LOCK_TIMEOUT_SECONDS = 0.5
# The tries of a migration that gave way, waiting twice as long after each (about 40 s in all).
TRIES = 10
FIRST_WAIT_SECONDS = 0.25
LONGEST_WAIT_SECONDS = 8.0


def _migration_names() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if _NAME.fullmatch(m.name))


def migrate(db: peewee.Database) -> list[str]:
    """Apply pending migrations to `db`; return the names applied."""

    class SchemaMigration(peewee.Model):
        name = peewee.CharField(max_length=100, primary_key=True)
        applied_at = UTCDateTimeField(default=utc_now)

        class Meta:
            database = db
            table_name = "schema_migrations"

    with db.connection_context():
        db.create_tables([SchemaMigration])
        done = {row.name for row in SchemaMigration.select()}
        applied = []
        for name in _migration_names():
            if name in done:
                continue
            module = importlib.import_module(f"{__name__}.{name}")
            _apply(db, module, lambda name=name: SchemaMigration.create(name=name))
            applied.append(name)
        return applied


def _apply(db: peewee.Database, module, record) -> None:
    """Run the migration `module` and `record` it, in one transaction; on PostgreSQL, taking its
    locks first and trying again while it runs out of time for them or deadlocks."""
    wait = FIRST_WAIT_SECONDS
    for tried in range(1, TRIES + 1):
        rebuilds = getattr(module, "REBUILDS_TABLES", False)
        off = _sqlite_foreign_keys_off(db) if rebuilds else contextlib.nullcontext()
        try:
            with off, db.atomic():
                if isinstance(db, peewee.PostgresqlDatabase):
                    _lock(db, getattr(module, "LOCKS", ()), getattr(module, "LOCK_MODE", None))
                module.up(db)
                record()
            return
        except peewee.OperationalError as error:
            gave_way = database_errors.timed_out(error) or database_errors.conflicted(error)
            if not gave_way or tried == TRIES:
                raise
            log.warning(
                "migration %s gave way to the app's transactions (%s); trying again in %.2f s",
                module.__name__.rpartition(".")[2],
                str(error).strip().splitlines()[0],
                wait,
            )
        time.sleep(wait)
        wait = min(2 * wait, LONGEST_WAIT_SECONDS)


def _lock(db: peewee.Database, tables, mode: str | None) -> None:
    """Bound this transaction's lock waits, lock `tables` in name order within that bound (one
    statement, so the whole taking is bounded), and lift the statement timeout: a migration's
    own work (an index on a large table) may take long once it holds what it needs."""
    bound = round(LOCK_TIMEOUT_SECONDS * 1000)
    db.execute_sql(f"SET LOCAL lock_timeout = {bound}")
    if tables:
        names = ", ".join(f'"{table}"' for table in sorted(tables))
        db.execute_sql(f"SET LOCAL statement_timeout = {bound}")
        db.execute_sql(f"LOCK TABLE {names} IN {mode or 'ACCESS EXCLUSIVE'} MODE")
    db.execute_sql("SET LOCAL statement_timeout = 0")


def pending(db: peewee.Database) -> list[str]:
    """The migrations not applied to `db` yet, in order, found in one query (all of them when
    nothing was ever migrated)."""
    try:
        applied = {name for (name,) in db.execute_sql("SELECT name FROM schema_migrations")}
    except (peewee.ProgrammingError, peewee.OperationalError) as error:
        # PostgreSQL's undefined table is a ProgrammingError, SQLite's an OperationalError
        # (like its other failures, hence the message).
        if isinstance(error, peewee.OperationalError) and "no such table" not in str(error):
            raise
        return _migration_names()
    return [name for name in _migration_names() if name not in applied]


@contextlib.contextmanager
def _sqlite_foreign_keys_off(db: peewee.Database):
    if not isinstance(db, peewee.SqliteDatabase):
        yield
        return
    db.execute_sql("PRAGMA foreign_keys = OFF")
    try:
        yield
    finally:
        db.execute_sql("PRAGMA foreign_keys = ON")
