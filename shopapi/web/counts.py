"""How an offset page counts its list: by default exactly in v1 and v2 and not at all from v3, or
as the client prefers (`Prefer: count=exact|planned|estimated|none`, RFC 7240, as PostgREST). An
exact count is remembered until a table it reads changes (models/table_versions.py)."""

import collections
import hashlib
import json
import threading

import peewee

from models import table_versions
from models.db import database, is_postgresql
from shopapi.internals import peewee as peewee_internals

# `count=estimated` counts exactly up to here, and takes the planner's estimate beyond: the count
# then costs at most this many rows, however long the list.
EXACT_UP_TO = 1000
_COUNTS = {"exact", "planned", "estimated", "none"}
# Exact counts remembered, by a digest of the list's statement (its filter and the caller's
# visibility are in it), with a digest of the table versions each holds for; the least recently
# used go first. An entry is about 250 bytes (tracemalloc): 10,000 are about 2.5 MB.
MAX_COUNTS_KEPT = 10_000
# Only a count of at least this many rows is remembered. A shorter one costs PostgreSQL about
# what reading its page does, and there is one such list per customer (their orders): in the
# soak, remembered, they grew the traced worker's heap by 1.4 MB in 16 minutes, a sixth of all
# it grew by (bench/results/soak-heap.md), for almost no second use.
REMEMBERED_FROM = 1000


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


class _Remembered:
    """Exact counts by statement, each with the versions it holds for; least recently used out."""

    def __init__(self):
        self._counts: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._counts)

    def get(self, key: bytes, versions: str) -> int | None:
        with self._lock:
            held = self._counts.get(key)
            if held is None or held[0] != _digest(versions):
                return None
            self._counts.move_to_end(key)
            return held[1]

    def put(self, key: bytes, versions: str, count: int) -> None:
        with self._lock:
            # The versions name every shard of every table read: a kilobyte, kept as 16 bytes.
            self._counts[key] = (_digest(versions), count)
            self._counts.move_to_end(key)
            while len(self._counts) > MAX_COUNTS_KEPT:
                self._counts.popitem(last=False)


remembered = _Remembered()


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def exactly(
    query: peewee.SelectQuery, statement: tuple, tables: frozenset[str], versions: str | None
) -> int:
    """The rows of `query` counted exactly: remembered while the versions of `tables` (which
    `query` reads, and maybe more) are still `versions`, read from the database the list reads
    before this; counted again, with the versions, when they are not (or when the count was
    short: REMEMBERED_FROM). `statement`, the list's SQL and parameters as its ETag rendered
    them, keys the count: what it counts is in it."""
    if versions is None or not table_versions.versioned(tables):
        return query.count()
    key = _digest(repr(statement))
    count = remembered.get(key, versions)
    if count is None:
        # Counted with the versions it holds for, which may be newer than `versions`.
        counted_at, count = table_versions.counted_with_versions(_unordered(statement), tables)
        if count >= REMEMBERED_FROM:
            remembered.put(key, counted_at, count)
    return count


def total(
    query: peewee.SelectQuery,
    how: str,
    statement: tuple,
    tables: frozenset[str],
    versions: str | None,
) -> tuple[int | None, str]:
    """The rows of `query` counted `how`, and how they were counted in the end: a planner's
    estimate exists only on PostgreSQL, so elsewhere `planned` and `estimated` count exactly.
    An exact count is remembered as `exactly` says."""
    if how == "none":
        return None, "none"
    if how == "exact" or not is_postgresql():
        return exactly(query, statement, tables, versions), "exact"
    if how == "estimated":
        bounded = query.limit(EXACT_UP_TO + 1).count()
        if bounded <= EXACT_UP_TO:
            return bounded, how
    return _planned(statement), how


def _unordered(statement: tuple) -> tuple[str, list]:
    """The list's query as a count runs it: its statement without the ORDER BY, not rendered
    again (rendering it cost a tenth of a short list's instructions)."""
    return peewee_internals.without_order_by(statement, database.param)


def _planned(statement: tuple) -> int:
    """The rows PostgreSQL's planner expects the list's query to return: no scan, from its
    statistics."""
    sql, params = _unordered(statement)
    (plan,) = database.execute_sql(f"EXPLAIN (FORMAT JSON) {sql}", params).fetchone()
    plan = plan if isinstance(plan, list) else json.loads(plan)
    return max(int(plan[0]["Plan"]["Plan Rows"]), 0)
