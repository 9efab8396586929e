"""Versioned schema migrations.

Each module `mNNNN_name.py` here has `up(db)`; `migrate(db)` applies, in order, those not yet
recorded in `schema_migrations`, each in its own transaction. A migration describes the schema as
it was when written (it never imports the models), so old migrations keep meaning what they did.
Run with `python -m models.migrations` (uses DATABASE_URL).

A migration that rebuilds SQLite tables says `REBUILDS_TABLES = True`: SQLite's foreign keys are
then off while it runs (they cannot be switched inside a transaction, and with them on, dropping
a table deletes what refers to it), and it checks them itself before committing.
"""

import contextlib
import importlib
import pkgutil
import re

import peewee

from models.fields import UTCDateTimeField, utc_now

_NAME = re.compile(r"m\d{4}_\w+")


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
            rebuilds = getattr(module, "REBUILDS_TABLES", False)
            off = _sqlite_foreign_keys_off(db) if rebuilds else contextlib.nullcontext()
            with off, db.atomic():
                module.up(db)
                SchemaMigration.create(name=name)
            applied.append(name)
        return applied


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
