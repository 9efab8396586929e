"""Pending orders expire (ORDER_HOLD_SECONDS): an order says why it was cancelled
(`cancellation_reason`: `requested` or `expired`), and the pending orders are found by age
through an index of them alone, which stays as small as the orders awaiting payment."""

import peewee


def up(db: peewee.Database) -> None:
    db.execute_sql('ALTER TABLE "order" ADD COLUMN "cancellation_reason" VARCHAR(16)')
    # Every order cancelled so far was cancelled by a request.
    db.execute_sql(
        'UPDATE "order" SET "cancellation_reason" = \'requested\' WHERE "status" = \'cancelled\''
    )
    db.execute_sql(
        'CREATE INDEX "order_pending_created_at" ON "order" ("created_at", "id")'
        " WHERE \"status\" = 'pending'"
    )
