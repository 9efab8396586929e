"""Versioned schema migrations.

Each module `mNNNN_name.py` here has `up(db)`; `migrate(db)` applies, in order, those not yet
recorded in `schema_migrations`, each in its own transaction. A migration describes the schema as
it was when written (it never imports the models), so old migrations keep meaning what they did.
Run with `python -m models.migrations` (uses DATABASE_URL).
"""

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
            with db.atomic():
                module.up(db)
                SchemaMigration.create(name=name)
            applied.append(name)
        return applied
