"""SQLite ids are never handed out twice.

A SQLite table without AUTOINCREMENT gives a new row the largest id + 1, so deleting the newest
product let the next one take its id: a client holding `/products/7` would find another product
there. Each table whose ids the API shows, or other rows keep, is rebuilt with AUTOINCREMENT,
which never reuses an id. PostgreSQL's sequences never do: nothing to change there.

The rebuild keeps every row and index (SQLite's own procedure: create the new table, copy,
drop the old, rename, with foreign keys off meanwhile), and checks every foreign key after.
"""

import peewee

TABLES = ("user", "product", "order", "order_item", "api_key", "oauth_client", "refresh_token")
_KEY = '"id" INTEGER NOT NULL PRIMARY KEY'
REBUILDS_TABLES = True


def up(db: peewee.Database) -> None:
    if not isinstance(db, peewee.SqliteDatabase):
        return
    for table in TABLES:
        _rebuild(db, table)
    broken = db.execute_sql("PRAGMA foreign_key_check").fetchall()
    if broken:
        raise peewee.IntegrityError(f"foreign keys broken by the rebuild: {broken[:5]}")


def _rebuild(db: peewee.Database, table: str) -> None:
    (create,) = db.execute_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).fetchone()
    if "AUTOINCREMENT" in create:
        return
    assert _KEY in create, create  # the key every table of ours was created with
    indexes = [
        sql
        for (sql,) in db.execute_sql(
            "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql NOT NULL",
            (table,),
        )
    ]
    new = f"{table}_with_autoincrement"
    new_create = create.replace(f'CREATE TABLE "{table}"', f'CREATE TABLE "{new}"', 1)
    db.execute_sql(new_create.replace(_KEY, f"{_KEY} AUTOINCREMENT", 1))
    db.execute_sql(f'INSERT INTO "{new}" SELECT * FROM "{table}"')  # noqa: S608 (our names)
    db.execute_sql(f'DROP TABLE "{table}"')  # its indexes with it
    db.execute_sql(f'ALTER TABLE "{new}" RENAME TO "{table}"')
    for sql in indexes:
        db.execute_sql(sql)
