import concurrent.futures
import contextlib
import os
import pathlib
import re
import subprocess
import uuid

import peewee
import psycopg2
import pytest
from support.helpers import scalar, wait_for
from support.live import run_module
from support.run_databases import database_beside

from models import MODELS
from models.db import create_database_if_missing, open_database
from models.migrations import m0012_table_versions, migrate

MIGRATIONS = pathlib.Path(migrate.__code__.co_filename).parent


def test_migrations_apply_once_and_are_recorded(tmp_path):
    db = open_database(f"sqlite:///{tmp_path}/fresh.db")
    applied = migrate(db)
    # Every module of models/migrations, in the order of their numbers: 1, 2, 3... each once.
    assert applied == sorted(path.stem for path in MIGRATIONS.glob("m[0-9][0-9][0-9][0-9]_*.py"))
    assert [int(name[1:5]) for name in applied] == list(range(1, len(applied) + 1))
    assert migrate(db) == []
    with db.connection_context():
        recorded = db.execute_sql("SELECT name FROM schema_migrations").fetchall()
    assert [name for (name,) in recorded] == applied


def test_the_migrations_make_every_table_and_column_the_models_read(database_url):
    """A column added to a model without its migration, or a migration without its model's
    column, is found here before any request reads the table."""
    db = open_database(database_url)
    migrate(db)
    with db.connection_context():
        tables = set(db.get_tables())
        for model in MODELS:
            table = model._meta.table_name
            assert table in tables, table
            stored = {column.name for column in db.get_columns(table)}
            declared = {field.column_name for field in model._meta.sorted_fields}
            assert declared == stored, table
        assert "owner_version" in tables  # m0015's counters, which triggers alone write
    db.close_all() if hasattr(db, "close_all") else db.close()


def test_a_failing_migration_leaves_nothing_half_done(tmp_path, monkeypatch):
    import models.migrations.m0001_initial as initial

    def broken(db):
        db.execute_sql("CREATE TABLE half (id INTEGER)")
        raise peewee.OperationalError("boom")

    monkeypatch.setattr(initial, "up", broken)
    db = open_database(f"sqlite:///{tmp_path}/fresh.db")
    with pytest.raises(peewee.OperationalError):
        migrate(db)
    with db.connection_context():
        assert "half" not in db.get_tables()
        assert db.execute_sql("SELECT count(*) FROM schema_migrations").fetchone() == (0,)


def test_sqlite_tables_rebuilt_for_autoincrement_keep_rows_keys_and_indexes(tmp_path, monkeypatch):
    import models.migrations as migrations

    db = open_database(f"sqlite:///{tmp_path}/old.db")
    names = migrations._migration_names()
    before_m0005 = names[: names.index("m0005_sqlite_ids_never_reused")]
    monkeypatch.setattr(migrations, "_migration_names", lambda: before_m0005)
    migrate(db)  # a database from before m0005, with data
    with db.connection_context():
        day = ("2026-01-01", "2026-01-01")
        for sql in (
            """INSERT INTO "user" VALUES (1, ?, ?, 'a@b.c', 'A', 'customer', 'x')""",
            """INSERT INTO product VALUES (1, ?, ?, 'S-1', 'P', NULL, 100, 'EUR', 5, NULL, 1)""",
            """INSERT INTO product VALUES (2, ?, ?, 'S-2', 'Q', NULL, 100, 'EUR', 5, NULL, 1)""",
            """INSERT INTO "order" VALUES (1, ?, ?, 1, 'pending', 100, 'EUR', NULL)""",
        ):
            db.execute_sql(sql, day)
        db.execute_sql("INSERT INTO order_item VALUES (1, 1, 1, 1, 100)")
        indexes = db.execute_sql("SELECT name FROM sqlite_master WHERE type = 'index'").fetchall()
    monkeypatch.setattr(
        migrations, "_migration_names", lambda: [*before_m0005, "m0005_sqlite_ids_never_reused"]
    )
    assert migrate(db) == ["m0005_sqlite_ids_never_reused"]
    with db.connection_context():
        assert db.execute_sql("SELECT id, sku FROM product").fetchall() == [(1, "S-1"), (2, "S-2")]
        assert db.execute_sql("SELECT order_id, product_id FROM order_item").fetchall() == [(1, 1)]
        assert sorted(
            db.execute_sql("SELECT name FROM sqlite_master WHERE type = 'index'").fetchall()
        ) == sorted(indexes)
        assert db.execute_sql("PRAGMA foreign_key_check").fetchall() == []
        # The foreign keys still hold against the rebuilt tables.
        with pytest.raises(peewee.IntegrityError):
            db.execute_sql("DELETE FROM product WHERE id = 1")  # an order refers to it
        with pytest.raises(peewee.IntegrityError):
            db.execute_sql("INSERT INTO order_item VALUES (2, 1, 99, 1, 100)")
        db.execute_sql("DELETE FROM product WHERE id = 2")
        db.execute_sql(
            """INSERT INTO product (created_at, updated_at, sku, name, price_cents, currency,
            stock, active) VALUES ('2026-01-01', '2026-01-01', 'S-3', 'R', 1, 'EUR', 0, 1)"""
        )
        assert db.execute_sql("SELECT max(id) FROM product").fetchone() == (3,)


# `make migrate` (python -m models.migrations), as a newcomer runs it.


def _migrate_command(database_url: str) -> subprocess.CompletedProcess:
    return run_module("models.migrations", {**os.environ, "DATABASE_URL": database_url})


@pytest.mark.slow
def test_make_migrate_creates_a_postgresql_database_that_does_not_exist(
    database_url, direct_database_url
):
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite makes its file itself")
    # On the server itself: a PgBouncer that was just refused a database holds the next client
    # of it for `server_login_retry` (3 s) before it logs in again, as long as the client's
    # connect timeout (3 s).
    server, _, name = direct_database_url.rpartition("/")
    missing = f"{name}_created_{uuid.uuid4().hex[:8]}"
    try:
        run = _migrate_command(f"{server}/{missing}")
        assert run.returncode == 0, run.stderr
        assert "created the database" in run.stdout
        assert "m0001_initial" in run.stdout
        assert _migrate_command(f"{server}/{missing}").stdout.strip().endswith("(up to date)")
    finally:
        # FORCE: a connection left to the new database would refuse the drop.
        admin = open_database(direct_database_url)
        with admin.connection_context():
            admin.execute_sql(f'DROP DATABASE IF EXISTS "{missing}" WITH (FORCE)')
        admin.close_all()


@pytest.mark.slow
def test_check_names_the_pending_migrations_and_migrates_nothing(
    database_url, direct_database_url, tmp_path
):
    if database_url.startswith("postgresql"):
        server, _, name = direct_database_url.rpartition("/")
        fresh = f"{server}/{name}_check_{uuid.uuid4().hex[:8]}"
        create_database_if_missing(fresh)
    else:
        fresh = f"sqlite:///{tmp_path}/fresh.db"
    env = {**os.environ, "DATABASE_URL": fresh}
    try:
        check = run_module("models.migrations", env, args=("--check",))
        assert check.returncode == 1, check.stderr
        assert check.stderr.startswith("migrations pending: m0001_initial, m0002_"), check.stderr
        db = open_database(fresh)
        with db.connection_context():
            assert db.get_tables() == [], "the check migrated"

        assert _migrate_command(fresh).returncode == 0
        check = run_module("models.migrations", env, args=("--check",))
        assert (check.returncode, check.stderr) == (0, ""), check.stderr
        assert "none pending" in check.stdout
    finally:
        if database_url.startswith("postgresql"):
            admin = open_database(direct_database_url)
            with admin.connection_context():
                drop = fresh.rpartition("/")[2]
                admin.execute_sql(f'DROP DATABASE IF EXISTS "{drop}" WITH (FORCE)')
            admin.close_all()


@pytest.mark.parametrize(
    ("database_url", "says"),
    [
        ("postgresql://postgres@127.0.0.1:1/shop", "cannot connect to DATABASE_URL"),
        ("postgresql://postgres@127.0.0.1:5432/", "DATABASE_URL names no database"),
        ("mysql://shop@db/shop", "DATABASE_URL"),
    ],
)
@pytest.mark.slow
def test_a_configuration_mistake_is_one_line_not_a_traceback(database_url, says):
    run = _migrate_command(database_url)
    assert run.returncode == 1
    problem = [line for line in run.stderr.splitlines() if line.startswith("shopapi: ")]
    assert len(problem) == 1 and says in problem[0], run.stderr
    assert "Traceback" not in run.stderr


def test_postgresql_vacuums_products_after_a_thousand_changes_of_100000(database_url):
    if not database_url.startswith("postgresql"):
        pytest.skip("autovacuum is PostgreSQL's")
    db = open_database(database_url)
    migrate(db)
    with db.connection_context():
        (options,) = db.execute_sql(
            "SELECT reloptions FROM pg_class WHERE oid = 'product'::regclass"
        ).fetchone()
    settings = dict(option.split("=") for option in options)
    threshold = float(settings["autovacuum_vacuum_threshold"])
    assert threshold + 100_000 * float(settings["autovacuum_vacuum_scale_factor"]) == 1000


@pytest.mark.slow
def test_a_migration_under_load_gives_way_to_the_worker_then_completes(
    database_url, direct_database_url, monkeypatch
):
    """m0012's triggers are made while a transaction holds the tables as the worker does when it
    records an attempt (`delivery` shared, `delivery_attempt` written, then `delivery` written):
    the migration gives way within its lock timeout, the worker's transaction goes through, and
    the migration, tried again, completes."""
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite has one writer: a migration waits on busy_timeout")
    import models.migrations as migrations

    server, _, name = direct_database_url.rpartition("/")
    url = f"{server}/{name}_under_load_{uuid.uuid4().hex[:8]}"
    create_database_if_missing(url)
    db = open_database(url)
    try:
        names = migrations._migration_names()
        before = names[: names.index("m0012_table_versions")]
        monkeypatch.setattr(migrations, "_migration_names", lambda: before)
        migrate(db)
        monkeypatch.setattr(
            migrations, "_migration_names", lambda: [*before, "m0012_table_versions"]
        )
        worker = psycopg2.connect(url)
        try:
            cursor = worker.cursor()
            cursor.execute("LOCK TABLE delivery IN ROW SHARE MODE")
            cursor.execute("LOCK TABLE delivery_attempt IN ROW EXCLUSIVE MODE")
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                migrating = pool.submit(migrate, db)
                waiting = (
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND datname = current_database()"
                )
                wait_for(lambda: scalar(url, waiting), "the migration to wait for a lock")
                cursor.execute("LOCK TABLE delivery IN ROW EXCLUSIVE MODE")  # the UPDATE's
                worker.commit()
                assert migrating.result() == ["m0012_table_versions"]
        finally:
            worker.close()
        triggers = "SELECT count(*) FROM pg_trigger WHERE tgname LIKE '%\\_version'"
        assert scalar(url, triggers) == len(m0012_table_versions.TABLES)
    finally:
        db.close_all()
        admin = open_database(direct_database_url)
        with admin.connection_context():
            admin.execute_sql(f'DROP DATABASE IF EXISTS "{url.rpartition("/")[2]}" WITH (FORCE)')
        admin.close_all()


@contextlib.contextmanager
def _empty_database(database_url, direct_database_url, tmp_path):
    """A database of the test's own, of `database_url`'s kind, with nothing in it."""
    if database_url.startswith("sqlite"):
        yield open_database(f"sqlite:///{tmp_path}/empty.db")
        return
    with database_beside(direct_database_url, "empty") as url:
        db = open_database(url, pool_size=1)
        try:
            yield db
        finally:
            db.close_all()


def test_events_written_before_m0014_get_message_ids_of_their_own(
    database_url, direct_database_url, tmp_path, monkeypatch
):
    import models.migrations as migrations

    names = migrations._migration_names()
    before = names[: names.index("m0014_ids_never_reissued")]
    event = (
        "INSERT INTO event (type, occurred_at, resource_type, resource_id, actor_subject, data)"
        " VALUES ('product.created', '2026-01-01', 'product', 1, 'client:tests', '{}')"
    )
    with _empty_database(database_url, direct_database_url, tmp_path) as db:
        monkeypatch.setattr(migrations, "_migration_names", lambda: before)
        migrate(db)
        with db.connection_context():
            for _ in range(3):
                db.execute_sql(event)
        monkeypatch.undo()
        assert migrate(db)[0] == "m0014_ids_never_reissued"
        with db.connection_context():
            db.execute_sql(event)  # as the release before, which knows no message_id, writes
            ids = [id for (id,) in db.execute_sql("SELECT message_id FROM event ORDER BY id")]
    if database_url.startswith("sqlite"):
        ids = ids[:3]  # SQLite's column has no default: the model gives each new event its id
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch("msg_[0-9a-f]{32}", id) for id in ids), ids
