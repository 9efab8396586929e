"""Revocation of what a user was issued: each user and refresh token gets a credentials
version, and `revocation` records every change that ended a version (see models/revocation.py).

Existing users and refresh tokens start at version 0, which every token issued before this
migration carries implicitly. Revocation ids are never reused on either database (AUTOINCREMENT
on SQLite, bigserial on PostgreSQL): every process reads the new rows by id.
"""

import peewee
from playhouse.sqlite_ext import AutoIncrementField

from models.fields import UTCDateTimeField, utc_now


def up(db: peewee.Database) -> None:
    sqlite = isinstance(db, peewee.SqliteDatabase)

    class Revocation(peewee.Model):
        id = AutoIncrementField() if sqlite else peewee.BigAutoField()
        user_id = peewee.BigIntegerField()
        credentials_version = peewee.IntegerField()
        revoked_at = UTCDateTimeField(default=utc_now, index=True)

        class Meta:
            database = db
            legacy_table_names = False

    for table in ("user", "refresh_token"):
        db.execute_sql(
            f'ALTER TABLE "{table}" ADD COLUMN credentials_version INTEGER NOT NULL DEFAULT 0'
        )
    db.create_tables([Revocation], safe=False)
