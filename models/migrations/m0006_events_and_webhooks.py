"""The event outbox, webhooks, and their deliveries and delivery attempts.

Their ids are never reused on either database (AUTOINCREMENT on SQLite, as m0005 made the other
tables; bigserial on PostgreSQL): a client catching up from the last event id it saw must never
find a new event under an old id.
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
        id = key()
        type = peewee.CharField(max_length=32)
        occurred_at = UTCDateTimeField(default=utc_now)
        resource_type = peewee.CharField(max_length=16)
        resource_id = peewee.BigIntegerField()
        owner_id = peewee.BigIntegerField(null=True)
        actor_subject = peewee.CharField(max_length=255)
        actor_user_id = peewee.BigIntegerField(null=True)
        data = peewee.TextField()
        dispatched_at = UTCDateTimeField(null=True)

        class Meta:
            indexes = (
                (("type", "id"), False),
                (("owner_id", "id"), False),
                (("resource_type", "resource_id", "id"), False),
            )

    class Webhook(Table):
        id = key()
        created_at = UTCDateTimeField(default=utc_now)
        updated_at = UTCDateTimeField(default=utc_now)
        owner = peewee.ForeignKeyField(User, null=True, on_delete="CASCADE", index=True)
        url = peewee.TextField()
        event_types = peewee.TextField()
        description = peewee.TextField(null=True)
        enabled = peewee.BooleanField(default=True)
        disabled_reason = peewee.TextField(null=True)
        secret = peewee.CharField(max_length=64)
        api_version = peewee.SmallIntegerField(default=1)

    class Delivery(Table):
        id = key()
        created_at = UTCDateTimeField(default=utc_now)
        updated_at = UTCDateTimeField(default=utc_now)
        webhook = peewee.ForeignKeyField(Webhook, on_delete="CASCADE", index=False)
        event = peewee.ForeignKeyField(Event, on_delete="CASCADE", index=True)
        resource_type = peewee.CharField(max_length=16)
        resource_id = peewee.BigIntegerField()
        status = peewee.CharField(max_length=16, default="pending")
        attempts = peewee.IntegerField(default=0)
        next_attempt_at = UTCDateTimeField(default=utc_now)
        leased_until = UTCDateTimeField(null=True)

        class Meta:
            indexes = ((("webhook", "id"), False),)

    class DeliveryAttempt(Table):
        id = key()
        delivery = peewee.ForeignKeyField(Delivery, on_delete="CASCADE", index=False)
        number = peewee.IntegerField()
        attempted_at = UTCDateTimeField(default=utc_now)
        duration_ms = peewee.IntegerField()
        response_status = peewee.IntegerField(null=True)
        error = peewee.TextField(null=True)

        class Meta:
            indexes = ((("delivery", "number"), True),)

    db.create_tables([Event, Webhook, Delivery, DeliveryAttempt], safe=False)
    # What the worker looks for, kept small: events not yet fanned out, and deliveries still
    # pending (by due time, and per webhook and resource for their order).
    db.execute_sql("CREATE INDEX event_undispatched ON event (id) WHERE dispatched_at IS NULL")
    db.execute_sql(
        "CREATE INDEX delivery_due ON delivery (next_attempt_at, id) WHERE status = 'pending'"
    )
    db.execute_sql(
        "CREATE INDEX delivery_pending_per_resource"
        " ON delivery (webhook_id, resource_type, resource_id, event_id)"
        " WHERE status = 'pending'"
    )
