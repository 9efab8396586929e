"""Indexes for the list language's common filters and sorts.

Each ends in `id` because every sort does (the tie-breaker), so an index serves both the ORDER BY
and the keyset condition of a cursor page, at any depth.
"""

import peewee
from playhouse.migrate import SchemaMigrator, migrate

INDEXES = {
    "product": [("price_cents", "id"), ("category", "id"), ("name", "id"), ("created_at", "id")],
    "order": [("user_id", "id"), ("status", "id"), ("created_at", "id")],
    "user": [("created_at", "id"), ("role", "id")],
}


def up(db: peewee.Database) -> None:
    migrator = SchemaMigrator.from_database(db)
    migrate(
        *(
            migrator.add_index(table, columns)
            for table, indexes in INDEXES.items()
            for columns in indexes
        )
    )
