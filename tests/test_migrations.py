import peewee
import pytest

from models.db import open_database
from models.migrations import migrate


def test_migrations_apply_once_and_are_recorded(tmp_path):
    db = open_database(f"sqlite:///{tmp_path}/fresh.db")
    assert migrate(db) == [
        "m0001_initial",
        "m0002_list_indexes",
        "m0003_credentials",
        "m0004_idempotency_keys",
    ]
    assert migrate(db) == []
    with db.connection_context():
        tables = set(db.get_tables())
        assert {
            "user",
            "product",
            "order",
            "order_item",
            "api_key",
            "oauth_client",
            "refresh_token",
            "idempotency_key",
        } <= tables
        recorded = db.execute_sql("SELECT name FROM schema_migrations").fetchall()
        assert recorded == [
            ("m0001_initial",),
            ("m0002_list_indexes",),
            ("m0003_credentials",),
            ("m0004_idempotency_keys",),
        ]


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
