"""`python -m models.after_promotion --database-url URL on_role_change master CLUSTER`: Patroni's
`on_role_change` callback. On a newly promoted primary it moves every sequence of the schema
`--margin` past its value, beyond any id the old primary may have issued in WAL this one never
received; once per timeline. Why and when: docs/database.md, "After a promotion"."""

import argparse
import dataclasses
import sys
import time

import peewee

from models.db import error_summary, open_database

# Ids one sequence may have issued in WAL lost by an asynchronous failover: 100 s of lag at the
# service's goal of 10,000 requests/s, all of them inserts into one table. Patroni promotes no
# standby more than `maximum_lag_on_failover` behind (1 MiB of WAL, a few thousand rows), but a
# promotion by hand has no bound. A million is 1/2147 of an int4 id's range, nothing of a bigint's.
DEFAULT_MARGIN = 1_000_000
# Roles Patroni names a primary by: 3.x says `master`, 4.x `primary`.
PRIMARY_ROLES = ("master", "primary")
# How long to wait for the server to leave recovery, and to answer at all.
DEFAULT_WAIT_SECONDS = 30.0


@dataclasses.dataclass(frozen=True)
class Advance:
    sequence: str
    before: int | None  # None: the sequence had handed out nothing
    after: int
    at_maximum: bool  # the margin did not fit: its next insert fails rather than reuse an id


def timeline(db: peewee.Database) -> int:
    """The timeline this primary writes on: the first 8 hex digits of its WAL file's name (the
    control file's checkpoint keeps the old one until the first checkpoint after promotion)."""
    (name,) = db.execute_sql("SELECT pg_walfile_name(pg_current_wal_lsn())").fetchone()
    return int(name[:8], 16)


def advance_sequences(db: peewee.Database, margin: int) -> tuple[int, list[Advance] | None]:
    """Move every sequence of the current schema `margin` past its last value (at most to its
    maximum), unless this timeline's were moved already: (timeline, what moved, or None)."""
    on = timeline(db)
    with db.atomic():
        # The marker and the moves commit together; two runs at once take turns on its row.
        marked = db.execute_sql("SELECT to_regclass('sequence_advance') IS NOT NULL").fetchone()[0]
        if marked:
            first = db.execute_sql(
                "INSERT INTO sequence_advance (timeline_id, advanced_at, margin)"
                " VALUES (%s, now() AT TIME ZONE 'UTC', %s)"
                " ON CONFLICT DO NOTHING RETURNING timeline_id",
                (on, margin),
            ).fetchone()
            if first is None:
                return on, None
        sequences = db.execute_sql(
            "SELECT format('%%I.%%I', schemaname, sequencename), last_value, start_value,"
            " max_value FROM pg_sequences WHERE schemaname = current_schema()"
            " ORDER BY sequencename"
        ).fetchall()
        moved = []
        for name, last, start, maximum in sequences:
            # setval is not transactional: a run that fails after it leaves the sequence
            # moved, and the next run moves it again, which only skips more ids.
            wanted = (start - 1 if last is None else last) + margin
            after = min(maximum, wanted)
            db.execute_sql("SELECT setval(%s::regclass, %s, true)", (name, after))
            moved.append(Advance(name, last, after, after < wanted))
        return on, moved


def _primary(url: str, wait_seconds: float) -> peewee.Database:
    """The database at `url` once it answers as a primary, waiting up to `wait_seconds`."""
    db = open_database(url, pool_size=1)
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            db.connect(reuse_if_open=True)
            if not db.execute_sql("SELECT pg_is_in_recovery()").fetchone()[0]:
                return db
            problem = "the server is still a standby"
        except peewee.OperationalError as error:
            db.close()
            problem = error_summary(error)
        if time.monotonic() >= deadline:
            raise peewee.OperationalError(f"{problem} after {wait_seconds:g} s")
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m models.after_promotion", description=__doc__)
    parser.add_argument("--database-url", required=True, help="the promoted PostgreSQL database")
    parser.add_argument("--margin", type=int, default=DEFAULT_MARGIN, help="ids to skip")
    parser.add_argument("--wait-seconds", type=float, default=DEFAULT_WAIT_SECONDS)
    # What Patroni appends: the callback's name, the node's new role, the cluster's name.
    parser.add_argument("callback", nargs="*", help="e.g. on_role_change master shopapi")
    args = parser.parse_args(argv)
    if args.margin < 1:
        parser.error("--margin must be at least 1")
    if args.callback:
        action, role = [*args.callback, ""][:2]
        if action != "on_role_change" or role not in PRIMARY_ROLES:
            print(f"after_promotion: {action} {role}: not a promotion, nothing to do")
            return 0
    if not args.database_url.startswith("postgres"):
        print("after_promotion: only PostgreSQL is promoted (SQLite never reuses ids: m0005)")
        return 0
    try:
        db = _primary(args.database_url, args.wait_seconds)
        try:
            on, moved = advance_sequences(db, args.margin)
        finally:
            db.close()
    except peewee.DatabaseError as error:
        summary = error_summary(error)
        print(f"after_promotion: cannot advance the sequences: {summary}", file=sys.stderr)
        return 1
    if moved is None:
        print(f"after_promotion: timeline {on}: sequences were advanced already, nothing to do")
        return 0
    for advance in moved:
        before = "nothing issued" if advance.before is None else advance.before
        print(f"after_promotion: timeline {on}: {advance.sequence} {before} -> {advance.after}")
        if advance.at_maximum:
            print(
                f"after_promotion: {advance.sequence} is at its maximum: its next insert fails",
                file=sys.stderr,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
