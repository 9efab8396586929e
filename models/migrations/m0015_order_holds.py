"""Pending orders expire (ORDER_HOLD_SECONDS): an order says why it was cancelled
(`cancellation_reason`: `requested` or `expired`), and the pending orders are found by age through
an index of them alone. And a change counter per owner of the rows a customer's lists read
(`owner_version`, beside m0012's table-wide ones), so that their ETags move with their own rows."""

import peewee

# The tables counted per owner, and the owner of a row (`row` is NEW or OLD) as an expression:
# a user's orders, their items (through their order), and the user themself.
OWNED = {
    "order": "{row}.user_id",
    "order_item": '(SELECT user_id FROM "order" WHERE id = {row}.order_id)',
    "user": "{row}.id",
}


def _bump(table: str, row: str, start: str) -> str:
    """The statement moving the counter of `row`'s owner (none when it has none: an item whose
    order went first); a new owner's counter starts at a random point, as m0012's do."""
    owner = OWNED[table].format(row=row)
    # A SELECT with a WHERE: SQLite's parser then takes the upsert after it.
    return (
        "INSERT INTO owner_version (table_name, owner_id, version)"  # noqa: S608 (ours)
        f" SELECT '{table}', owner, {start} FROM (SELECT {owner} AS owner) AS owned"
        " WHERE owner IS NOT NULL"
        " ON CONFLICT (table_name, owner_id) DO UPDATE SET version = owner_version.version + 1"
    )


# PostgreSQL: one function per table (each names its own columns), for each row.
_FUNCTION = """
CREATE FUNCTION "{table}_owner_version_bump"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN {bump_old}; END IF;
    IF TG_OP <> 'DELETE' THEN {bump_new}; END IF;
    RETURN NULL;
END $$
"""


def up(db: peewee.Database) -> None:
    postgresql = isinstance(db, peewee.PostgresqlDatabase)
    db.execute_sql('ALTER TABLE "order" ADD COLUMN "cancellation_reason" VARCHAR(16)')
    # Every order cancelled so far was cancelled by a request.
    db.execute_sql(
        'UPDATE "order" SET "cancellation_reason" = \'requested\' WHERE "status" = \'cancelled\''
    )
    db.execute_sql(
        'CREATE INDEX "order_pending_created_at" ON "order" ("created_at", "id")'
        " WHERE \"status\" = 'pending'"
    )
    db.execute_sql(
        "CREATE TABLE owner_version (table_name VARCHAR(63) NOT NULL, owner_id BIGINT NOT NULL,"
        " version BIGINT NOT NULL, PRIMARY KEY (table_name, owner_id))"
    )
    if postgresql:
        start = "floor(random() * 1e15)::bigint"
        for table in OWNED:
            db.execute_sql(
                _FUNCTION.format(
                    table=table,
                    bump_old=_bump(table, "OLD", start),
                    bump_new=_bump(table, "NEW", start),
                )
            )
            db.execute_sql(
                f'CREATE TRIGGER "{table}_owner_version" AFTER INSERT OR UPDATE OR DELETE'
                f' ON "{table}" FOR EACH ROW EXECUTE FUNCTION "{table}_owner_version_bump"()'
            )
        return
    start = "abs(random() % 1000000000000000)"
    for table in OWNED:
        for event, rows in (("INSERT", ["NEW"]), ("UPDATE", ["OLD", "NEW"]), ("DELETE", ["OLD"])):
            bumps = " ".join(f"{_bump(table, row, start)};" for row in rows)
            db.execute_sql(
                f'CREATE TRIGGER "{table}_owner_version_{event.lower()}" AFTER {event}'
                f' ON "{table}" BEGIN {bumps} END'
            )
