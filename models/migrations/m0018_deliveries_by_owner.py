"""m0015's per-owner change counters (`owner_version`) for the deliveries and their attempts,
webhooks' and devices', so that a webhook's or a device's delivery list moves with its owner's
deliveries alone, not with everyone's. A delivery's owner is its webhook's (a partner's; an
admin's webhook has none, and no counter) or its device's user; an attempt's, its delivery's.

The worker writes these rows: fanning events out (one transaction for a batch, creating the
deliveries owner by owner, so two fan-outs take owners' counters in the same order),
leasing a delivery, recording an attempt. Each then also moves one counter row of the owner."""

import peewee

from models.migrations.m0016_events_devices_webhooks_by_owner import owner_triggers

# The owner of a row (`row` is NEW or OLD), found through the row it belongs to. A row deleted
# with its webhook or device (ON DELETE CASCADE) finds no owner and moves nothing: the webhook's
# or the device's own deletion moves the owner's lists.
OWNED = {
    "delivery": "(SELECT owner_id FROM webhook WHERE id = {row}.webhook_id)",
    "delivery_attempt": "(SELECT webhook.owner_id FROM delivery"
    " JOIN webhook ON webhook.id = delivery.webhook_id WHERE delivery.id = {row}.delivery_id)",
    "push_delivery": "(SELECT user_id FROM device WHERE id = {row}.device_id)",
    "push_attempt": "(SELECT device.user_id FROM push_delivery"
    " JOIN device ON device.id = push_delivery.device_id"
    " WHERE push_delivery.id = {row}.delivery_id)",
}
# Taken first, in one bounded statement, in the mode CREATE TRIGGER takes (as m0016).
LOCKS = tuple(sorted(OWNED))
LOCK_MODE = "SHARE ROW EXCLUSIVE"


def up(db: peewee.Database) -> None:
    owner_triggers(db, OWNED, {})
