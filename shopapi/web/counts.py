"""How an offset page counts its list: by default exactly in v1 and v2 and not at all from v3, or
as the client prefers (`Prefer: count=exact|planned|estimated|none`, RFC 7240, as PostgREST)."""

import json

import peewee

from models.db import database, is_postgresql

# `count=estimated` counts exactly up to here, and takes the planner's estimate beyond: the count
# then costs at most this many rows, however long the list.
EXACT_UP_TO = 1000
_COUNTS = {"exact", "planned", "estimated", "none"}


def by_default(version: int) -> str:
    """How a list of `version` counts when Prefer does not say: exactly in v1 and v2, which
    always did; not at all from v3 on, where a count is work only the clients that show one ask."""
    return "exact" if version < 3 else "none"


def preferred(prefer: str | None) -> str | None:
    """The `count` preference among a Prefer header's (RFC 7240 §2: comma-separated, each
    `name[=value]` with optional parameters after `;`), if it is one this API offers.
    Unknown preferences are ignored, as the RFC asks."""
    for preference in (prefer or "").split(","):
        name, _, value = preference.partition(";")[0].partition("=")
        if name.strip().lower() == "count":
            value = value.strip().strip('"').lower()
            return value if value in _COUNTS else None
    return None


def total(query: peewee.SelectQuery, how: str) -> tuple[int | None, str]:
    """The rows of `query` counted `how`, and how they were counted in the end: a planner's
    estimate exists only on PostgreSQL, so elsewhere `planned` and `estimated` count exactly."""
    if how == "none":
        return None, "none"
    if how == "exact" or not is_postgresql():
        return query.count(), "exact"
    if how == "estimated":
        bounded = query.limit(EXACT_UP_TO + 1).count()
        if bounded <= EXACT_UP_TO:
            return bounded, how
    return _planned(query), how


def _planned(query: peewee.SelectQuery) -> int:
    """The rows PostgreSQL's planner expects `query` to return: no scan, from its statistics."""
    sql, params = query.order_by().sql()
    (plan,) = database.execute_sql(f"EXPLAIN (FORMAT JSON) {sql}", params).fetchone()
    plan = plan if isinstance(plan, list) else json.loads(plan)
    return max(int(plan[0]["Plan"]["Plan Rows"]), 0)
