"""Idempotency keys: each client's keys for POST requests, and the answers stored for replay."""

import peewee

from models.fields import UTCDateTimeField, utc_now


def up(db: peewee.Database) -> None:
    class IdempotencyKey(peewee.Model):
        created_at = UTCDateTimeField(default=utc_now)
        updated_at = UTCDateTimeField(default=utc_now)
        client = peewee.TextField()
        key = peewee.CharField(max_length=255)
        fingerprint = peewee.CharField(max_length=64)
        token = peewee.CharField(max_length=32)
        claimed_at = UTCDateTimeField(index=True)
        status = peewee.IntegerField(null=True)
        headers = peewee.TextField(null=True)
        body = peewee.BlobField(null=True)

        class Meta:
            database = db
            legacy_table_names = False
            # The claim: one row per client and key, whoever inserts it first.
            indexes = ((("client", "key"), True),)

    db.create_tables([IdempotencyKey])
