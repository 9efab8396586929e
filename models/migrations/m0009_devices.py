"""Users' devices for push notifications, and the push deliveries and their attempts.

Ids as m0006 made them (never reused); a device is found by the digest of its platform and
token, unique, so that registering a token again finds the same device.
"""

import peewee
from playhouse.sqlite_ext import AutoIncrementField

from models.fields import UTCDateTimeField, utc_now


def up(db: peewee.Database) -> None:
    def key():
        sqlite = isinstance(db, peewee.SqliteDatabase)
        return AutoIncrementField() if sqlite else peewee.BigAutoField()

    class Table(peewee.Model):
        class Meta:
            database = db
            legacy_table_names = False

    class User(Table):
        pass

    class Event(Table):
        pass

    class Device(Table):
        id = key()
        created_at = UTCDateTimeField(default=utc_now)
        updated_at = UTCDateTimeField(default=utc_now)
        user = peewee.ForeignKeyField(User, on_delete="CASCADE", index=True)
        platform = peewee.CharField(max_length=8)
        token = peewee.TextField()
        token_digest = peewee.CharField(max_length=64, unique=True)
        token_hint = peewee.CharField(max_length=300)
        p256dh = peewee.CharField(max_length=100, null=True)
        auth = peewee.CharField(max_length=50, null=True)
        removed_at = UTCDateTimeField(null=True)
        removed_reason = peewee.TextField(null=True)

    class PushDelivery(Table):
        id = key()
        created_at = UTCDateTimeField(default=utc_now)
        updated_at = UTCDateTimeField(default=utc_now)
        device = peewee.ForeignKeyField(Device, on_delete="CASCADE", index=False)
        event = peewee.ForeignKeyField(Event, on_delete="CASCADE", index=True)
        status = peewee.CharField(max_length=16, default="pending")
        attempts = peewee.IntegerField(default=0)
        next_attempt_at = UTCDateTimeField(default=utc_now)
        leased_until = UTCDateTimeField(null=True)

        class Meta:
            indexes = ((("device", "id"), False),)

    class PushAttempt(Table):
        id = key()
        delivery = peewee.ForeignKeyField(PushDelivery, on_delete="CASCADE", index=False)
        number = peewee.IntegerField()
        attempted_at = UTCDateTimeField(default=utc_now)
        duration_ms = peewee.IntegerField()
        response_status = peewee.IntegerField(null=True)
        error = peewee.TextField(null=True)

        class Meta:
            indexes = ((("delivery", "number"), True),)

    db.create_tables([Device, PushDelivery, PushAttempt], safe=False)
    db.execute_sql(
        "CREATE INDEX push_delivery_due ON push_delivery (next_attempt_at, id)"
        " WHERE status = 'pending'"
    )
