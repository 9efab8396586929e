"""Each listed table's change counter (models/migrations/m0012_table_versions.py): the triggers
move it in the transaction of every write to the table, so while it stands still, so does
whatever was read from the table. Some tables are also counted per owner (m0015, m0016, m0018):
`order@7` is user 7's orders alone. Read where the list reads (models/routing.py)."""

import re

import peewee

from models.db import database, is_postgresql

# The tables whose writes move a counter: those that lists read. The migrations give them their
# triggers (m0012 the first ones; one that versions another table adds it here too).
VERSIONED = frozenset(
    {
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
    }
)
# The tables also counted per owner (m0015, m0016, m0018), whose rows each belong to one user
# (a delivery and its attempts to its webhook's or its device's).
OWNED = frozenset(
    {
        "order",
        "order_item",
        "user",
        "device",
        "webhook",
        "event",
        "delivery",
        "delivery_attempt",
        "push_delivery",
        "push_attempt",
    }
)
# The owner whose counter counts the rows of no one that every viewer sees (the catalogue's
# events, m0016): an id no user has, and not 0, which credentials acting for no user are
# given as theirs (they own nothing).
NO_ONE = -1
# Peewee quotes every table it names; a subquery's FROM is a parenthesis, not a name.
_TABLE = re.compile(r'\b(?:FROM|JOIN)\s+"(\w+)"')


def tables_read_by(sql: str) -> frozenset[str]:
    """The tables a query's `sql` reads, subqueries included."""
    return frozenset(_TABLE.findall(sql))


def versioned(tables) -> bool:
    return bool(tables) and VERSIONED.issuperset(table.partition("@")[0] for table in tables)


def owned_by(tables: frozenset[str], owners: tuple[int, ...]) -> frozenset[str]:
    """`tables` as a list of the rows of `owners` alone reads them: each table counted per owner
    as those owners' (`order@7`, `event@7` and `event@-1`), so that others' writes do not move
    its versions."""
    return frozenset(
        counted
        for table in tables
        for counted in ([f"{table}@{owner}" for owner in owners] if table in OWNED else [table])
    )


def _versions_sql(tables: frozenset[str]) -> peewee.SQL:
    # Every counter of the tables, not their sum: on PostgreSQL a standby may make commits
    # visible in another order than the primary did, and only the counters one by one then
    # still tell two states apart.
    whole = sorted(table for table in tables if "@" not in table)
    owned = sorted(tuple(table.split("@")) for table in tables if "@" in table)
    parts, params = [], []
    if whole:
        marks = ", ".join([database.param] * len(whole))
        if is_postgresql():
            aggregate = "string_agg(table_name || ':' || version, ',' ORDER BY table_name, shard)"
            source = "table_version"
        else:
            aggregate = "group_concat(table_name || ':' || version, ',')"
            source = "(SELECT * FROM table_version ORDER BY table_name, shard)"
        parts.append(f"(SELECT {aggregate} FROM {source} WHERE table_name IN ({marks}))")  # noqa: S608
        params += whole
    for table, owner in owned:
        # An owner whose rows were never written since m0015 has no counter yet: its first
        # write makes one.
        parts.append(
            f"(SELECT '{table}@' || owner_id || ':' || version FROM owner_version"  # noqa: S608
            f" WHERE table_name = {database.param} AND owner_id = {database.param})"
        )
        params += [table, int(owner)]
    joined = " || ',' || ".join(f"COALESCE({part}, '-')" for part in parts)
    return peewee.SQL(f"({joined})", params)


def _which_database() -> str:
    # One process may serve from more than one database (the tests do, SQLite and PostgreSQL):
    # equal counters of two of them say nothing.
    return f"{type(database.obj).__name__}:{database.obj.database}"


def versions_of(tables: frozenset[str]) -> str:
    """The counters of `tables` as one string, which changes whenever any of them is written."""
    # Its SQL as it is, not a Select of it for Peewee to render: every list and revalidation
    # reads it.
    versions_sql = _versions_sql(tables)
    (versions,) = database.execute_sql(f"SELECT {versions_sql.sql}", versions_sql.params).fetchone()
    return f"{_which_database()}/{versions}"


def counted_with_versions(statement: tuple[str, list], tables: frozenset[str]) -> tuple[str, int]:
    """The rows of the query whose SQL and parameters are `statement` counted, and the counters
    of `tables` that count holds for: one statement, so that both are read from one snapshot of
    one database. Run from its SQL as it is, as `versions_of` is."""
    sql, params = statement
    versions_sql = _versions_sql(tables)
    # Peewee's SQL, its values all parameters.
    counting = f'SELECT {versions_sql.sql}, (SELECT COUNT(1) FROM ({sql}) AS "counted")'  # noqa: S608
    versions, total = database.execute_sql(counting, [*versions_sql.params, *params]).fetchone()
    return f"{_which_database()}/{versions}", total
