"""m0015's per-owner change counters (`owner_version`) for three more tables: a user's devices,
a partner's webhooks, and the events each user sees, so that their lists' ETags move with their
own rows. The catalogue's events (no owner), which every product reader sees, count as owner
-1's (models/table_versions.py, NO_ONE). An event's `dispatched_at`, which no list shows, moves
nothing."""

import peewee

# The owner of a row (`row` is NEW or OLD) as an expression. A webhook of no one (an admin's)
# is no customer's or partner's row: it has no counter, as m0015's items of a deleted order.
OWNED = {
    "device": "{row}.user_id",
    "webhook": "{row}.owner_id",
    "event": "COALESCE({row}.owner_id, -1)",
}
# The columns whose change moves the owner's counter: all, but the worker's mark on an event
# (a fan-out marking a hundred events would otherwise queue every catalogue writer behind the
# catalogue's counter until it commits).
_UPDATED = {
    "event": "UPDATE OF type, occurred_at, resource_type, resource_id, owner_id,"
    " actor_subject, actor_user_id, data, message_id"
}
# Taken first, in one bounded statement, in the mode CREATE TRIGGER takes (as m0012): the worker
# writes all three.
LOCKS = tuple(sorted(OWNED))
LOCK_MODE = "SHARE ROW EXCLUSIVE"


def _bump(table: str, owner: str, start: str) -> str:
    """m0015's statement moving the counter of `owner` (an expression) for `table`."""
    return (
        "INSERT INTO owner_version (table_name, owner_id, version)"  # noqa: S608 (ours)
        f" SELECT '{table}', owner, {start} FROM (SELECT {owner} AS owner) AS owned"
        " WHERE owner IS NOT NULL"
        " ON CONFLICT (table_name, owner_id) DO UPDATE SET version = owner_version.version + 1"
    )


_FUNCTION = """
CREATE FUNCTION "{table}_owner_version_bump"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN {bump_old}; END IF;
    IF TG_OP <> 'DELETE' THEN {bump_new}; END IF;
    RETURN NULL;
END $$
"""


def up(db: peewee.Database) -> None:
    owner_triggers(db, OWNED, _UPDATED)


def owner_triggers(db: peewee.Database, owned: dict[str, str], updated: dict[str, str]) -> None:
    """Triggers moving the counter of each table's row owner (`owned`: the owner of `{row}` as
    an expression) on every insert, delete and update (of the columns `updated` names, where it
    names a table's)."""
    if isinstance(db, peewee.PostgresqlDatabase):
        start = "floor(random() * 1e15)::bigint"
        for table, owner in owned.items():
            db.execute_sql(
                _FUNCTION.format(
                    table=table,
                    bump_old=_bump(table, owner.format(row="OLD"), start),
                    bump_new=_bump(table, owner.format(row="NEW"), start),
                )
            )
            db.execute_sql(
                f'CREATE TRIGGER "{table}_owner_version" AFTER INSERT OR'
                f" {updated.get(table, 'UPDATE')} OR DELETE"
                f' ON "{table}" FOR EACH ROW EXECUTE FUNCTION "{table}_owner_version_bump"()'
            )
        return
    start = "abs(random() % 1000000000000000)"
    for table, owner in owned.items():
        changes = updated.get(table, "UPDATE")
        for event, rows in (("INSERT", ["NEW"]), (changes, ["OLD", "NEW"]), ("DELETE", ["OLD"])):
            bumps = " ".join(f"{_bump(table, owner.format(row=row), start)};" for row in rows)
            name = event.split()[0].lower()
            db.execute_sql(
                f'CREATE TRIGGER "{table}_owner_version_{name}" AFTER {event}'
                f' ON "{table}" BEGIN {bumps} END'
            )
