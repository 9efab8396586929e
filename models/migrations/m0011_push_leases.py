"""The push deliveries being attempted (pending, leased), found without reading the backlog:
each claim counts them per owner (models/device.py, PushDelivery.claim_due)."""

import peewee


def up(db: peewee.Database) -> None:
    db.execute_sql(
        "CREATE INDEX push_delivery_leased ON push_delivery (leased_until)"
        " WHERE status = 'pending' AND leased_until IS NOT NULL"
    )
