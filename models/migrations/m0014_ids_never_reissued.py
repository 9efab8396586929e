"""Ids never handed out twice across a failover: each event gets a random `message_id` (its
`webhook-id`, no longer derived from its sequence), and `sequence_advance` records the timelines
whose sequences `python -m models.after_promotion` moved on (docs/database.md, "After a promotion").

The message id is `msg_` and a random UUID's 32 hex digits, existing events' included. On
PostgreSQL the column's default makes one for rows that a release from before this one inserts
during a rolling deploy. No unique index: 122 random bits repeat after about 2^61 events, and an
index would cost every event's write.
"""

import peewee

_NEW_ID = {
    "postgresql": "'msg_' || replace(gen_random_uuid()::text, '-', '')",
    "sqlite": "'msg_' || lower(hex(randomblob(16)))",
}


def up(db: peewee.Database) -> None:
    if isinstance(db, peewee.PostgresqlDatabase):
        # A volatile default is evaluated for each existing row: each gets its own id.
        db.execute_sql(
            'ALTER TABLE "event" ADD COLUMN "message_id" VARCHAR(36) NOT NULL'
            f" DEFAULT ({_NEW_ID['postgresql']})"
        )
        db.execute_sql(
            'CREATE TABLE "sequence_advance" ("timeline_id" BIGINT NOT NULL PRIMARY KEY,'
            ' "advanced_at" TIMESTAMP NOT NULL, "margin" BIGINT NOT NULL)'
        )
    else:
        # SQLite adds no column with a default that is not a constant: filled here, and by the
        # model for each new event. SQLite has no failover, so no sequence_advance either.
        db.execute_sql('ALTER TABLE "event" ADD COLUMN "message_id" VARCHAR(36)')
        db.execute_sql(f'UPDATE "event" SET "message_id" = {_NEW_ID["sqlite"]}')  # noqa: S608
