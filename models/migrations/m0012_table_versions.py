"""A change counter for each table a list reads, moved by triggers in the transaction of every
write to it, whoever writes (models/table_versions.py reads them). PostgreSQL keeps 16 counters
a table, so that concurrent writers of one table do not queue on one row."""

import peewee

TABLES = (
    "user",
    "product",
    "order",
    "order_item",
    "api_key",
    "oauth_client",
    "event",
    "webhook",
    "delivery",
    "delivery_attempt",
    "device",
    "push_delivery",
    "push_attempt",
)
SHARDS = 16
# Taken first by the runner, in one bounded statement (models/migrations/__init__.py), in the
# mode CREATE TRIGGER takes: writes wait, reads go on. Taken trigger by trigger, unbounded, they
# deadlocked with the worker recording an attempt (a `delivery` row locked, a `delivery_attempt`
# row inserted, then the `delivery` row updated), and the worker's transaction was ended.
LOCKS = TABLES
LOCK_MODE = "SHARE ROW EXCLUSIVE"

# A writer takes the first counter of the table that no other transaction holds, starting from
# one its connection prefers (so one transaction's statements reuse one); only when all are held
# does it wait for one. Each counter's moves are ordered by its row lock, so the counters
# together say exactly which writes a snapshot sees, on the primary and on every standby.
_BUMP = """
CREATE OR REPLACE FUNCTION table_version_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE table_version SET version = version + 1
    WHERE table_name = TG_TABLE_NAME AND shard = (
        SELECT shard FROM table_version WHERE table_name = TG_TABLE_NAME
        ORDER BY mod(shard + pg_backend_pid(), {shards}) LIMIT 1 FOR UPDATE SKIP LOCKED);
    IF NOT FOUND THEN
        UPDATE table_version SET version = version + 1
        WHERE table_name = TG_TABLE_NAME AND shard = mod(pg_backend_pid(), {shards});
    END IF;
    RETURN NULL;
END $$
"""


def up(db: peewee.Database) -> None:
    postgresql = isinstance(db, peewee.PostgresqlDatabase)
    db.execute_sql(
        "CREATE TABLE table_version (table_name VARCHAR(63) NOT NULL, shard INTEGER NOT NULL,"
        " version BIGINT NOT NULL, PRIMARY KEY (table_name, shard))"
    )
    # Counters start at a random point: a database made again under the same name does not
    # repeat the versions that a running process has counts remembered for.
    start = "floor(random() * 1e15)::bigint" if postgresql else "abs(random() % 1000000000000000)"
    for table in TABLES:
        for shard in range(SHARDS if postgresql else 1):
            db.execute_sql(
                "INSERT INTO table_version (table_name, shard, version)"  # noqa: S608 (ours)
                f" VALUES ({db.param}, {db.param}, {start})",
                (table, shard),
            )
    if postgresql:
        db.execute_sql(_BUMP.format(shards=SHARDS))
        for table in TABLES:
            db.execute_sql(
                f'CREATE TRIGGER "{table}_version" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE'
                f' ON "{table}" FOR EACH STATEMENT EXECUTE FUNCTION table_version_bump()'
            )
        return
    # SQLite has row triggers only, and one writer at a time: one counter a table.
    for table in TABLES:
        for event in ("INSERT", "UPDATE", "DELETE"):
            db.execute_sql(
                f'CREATE TRIGGER "{table}_version_{event.lower()}" AFTER {event} ON "{table}"'  # noqa: S608
                f" BEGIN UPDATE table_version SET version = version + 1"
                f" WHERE table_name = '{table}'; END"
            )
