"""After a promotion no id is handed out twice: `python -m models.after_promotion`, as Patroni's
`on_role_change` callback runs it, on a PostgreSQL database of the test's own whose sequences
are set back as a standby's are when the old primary's last writes never reached it."""

import os

import pytest
from support.live import run_module
from support.run_databases import database_beside

from models.db import open_database
from models.migrations import migrate
from shopapi.testing.ports import free_port

PRODUCT = (
    "INSERT INTO product (created_at, updated_at, sku, name, price_cents, currency, stock, active)"
    " VALUES (now(), now(), %s, 'P', 100, 'EUR', 1, true) RETURNING id"
)
EVENT = (
    "INSERT INTO event (type, occurred_at, resource_type, resource_id, actor_subject, data)"
    " VALUES ('product.created', now(), 'product', 1, 'client:tests', '{}') RETURNING id"
)


@pytest.fixture
def own_database(database_url, direct_database_url):
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite is never promoted, and never reuses an id (m0005)")
    with database_beside(direct_database_url, "promoted") as url:
        db = open_database(url, pool_size=1)
        migrate(db)
        try:
            yield url, db
        finally:
            db.close_all()


def _insert(db, sql: str, *params) -> int:
    with db.connection_context(), db.atomic():
        return db.execute_sql(sql, params).fetchone()[0]


def _lose_writes_after(db, table: str, kept: int) -> None:
    """What a standby promoted without the old primary's last writes has: the rows after `kept`
    missing, and the table's sequence where the standby last heard of it."""
    with db.connection_context(), db.atomic():
        db.execute_sql(f'DELETE FROM "{table}" WHERE id > %s', (kept,))  # noqa: S608
        db.execute_sql(f"SELECT setval(pg_get_serial_sequence('\"{table}\"', 'id'), %s)", (kept,))


def _after_promotion(url: str, *args: str):
    return run_module(
        "models.after_promotion", dict(os.environ), args=("--database-url", url, *args)
    )


def test_after_a_promotion_that_lost_writes_the_next_ids_are_past_every_id_issued(own_database):
    url, db = own_database
    products = [_insert(db, PRODUCT, f"SKU-{n}") for n in range(5)]
    events = [_insert(db, EVENT) for _ in range(5)]
    _lose_writes_after(db, "product", products[2])
    _lose_writes_after(db, "event", events[1])
    assert _insert(db, PRODUCT, "SKU-AGAIN") == products[3]  # what happens with no callback
    _lose_writes_after(db, "product", products[2])

    run = _after_promotion(url, "on_role_change", "master", "shopapi")

    assert run.returncode == 0, run.stderr
    assert _insert(db, PRODUCT, "SKU-NEW") > max(products)
    assert _insert(db, EVENT) > max(events)
    assert f"public.product_id_seq {products[2]} -> {products[2] + 1_000_000}" in run.stdout
    assert "public.user_id_seq nothing issued -> 1000000" in run.stdout


def test_run_twice_on_one_timeline_it_advances_once(own_database):
    url, db = own_database
    issued = _insert(db, PRODUCT, "SKU-1")
    first = _after_promotion(url, "--margin=1000", "on_role_change", "primary", "shopapi")
    again = _after_promotion(url, "--margin=1000", "on_role_change", "primary", "shopapi")

    assert first.returncode == again.returncode == 0, first.stderr + again.stderr
    assert "sequences were advanced already, nothing to do" in again.stdout
    assert _insert(db, PRODUCT, "SKU-2") == issued + 1000 + 1


def test_any_other_role_change_moves_nothing(own_database):
    url, db = own_database
    issued = _insert(db, PRODUCT, "SKU-1")
    for role in ("replica", "demoted", "standby_leader"):
        run = _after_promotion(url, "on_role_change", role, "shopapi")
        assert run.returncode == 0, run.stderr
        assert "not a promotion, nothing to do" in run.stdout
    assert _after_promotion(url, "on_start", "master", "shopapi").returncode == 0
    assert _insert(db, PRODUCT, "SKU-2") == issued + 1


def test_an_int4_sequence_near_its_end_stops_at_its_maximum_and_says_so(own_database):
    url, db = own_database
    with db.connection_context():
        db.execute_sql("SELECT setval('product_id_seq', 2147483000)")
    run = _after_promotion(url, "on_role_change", "master", "shopapi")
    assert run.returncode == 0, run.stderr
    assert "public.product_id_seq 2147483000 -> 2147483647" in run.stdout
    assert "public.product_id_seq is at its maximum: its next insert fails" in run.stderr


def test_a_database_that_does_not_answer_is_exit_status_1_after_the_wait():
    nowhere = f"postgresql://postgres@127.0.0.1:{free_port()}/shop"
    run = _after_promotion(nowhere, "--wait-seconds=1", "on_role_change", "master", "shopapi")
    assert run.returncode == 1
    assert run.stderr.startswith("after_promotion: cannot advance the sequences: ")
    assert "Traceback" not in run.stderr
