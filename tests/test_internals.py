"""The library internals shopapi/internals.py relies on, each held to what the service needs of
it: when a release of Connexion or Peewee changes one, the test names it here rather than a
request failing somewhere else."""

import copy
import functools
import inspect

import pytest
from connexion.apps.flask import FlaskASGIApp
from connexion.exceptions import InvalidSpecification
from connexion.spec import Specification
from playhouse.pool import PooledPostgresqlDatabase

from app import SPEC_DIR
from models import Product
from models.db import database, open_database, use
from models.routing import Route, current_route
from shopapi import internals
from shopapi.contract import checked_specs
from shopapi.pipeline.wsgi_bridge import WSGIBridge


def test_flask_is_served_through_our_bridge(app, client):
    """FlaskApp keeps its inner ASGI app in `_middleware_app`, and Flask's ASGI bridge in its
    `asgi_app`: the request below must have crossed our bridge to reach Flask."""
    assert isinstance(app._middleware_app, FlaskASGIApp)
    assert isinstance(app._middleware_app.asgi_app, WSGIBridge)
    assert client.get("/v1/products").status_code == 200


MARKS = SPEC_DIR / ".checked"  # as create_app has it


def test_connexion_checks_each_spec_through_check_specs_with(tmp_path):
    """Connexion's Specification runs its schema check in `_validate_spec`: through ours, each
    spec it loads reaches the check given, and an invalid one is still refused (and, being
    invalid, never remembered as valid)."""
    seen = []

    def check(spec, validate):
        seen.append(spec["info"]["title"])
        checked_specs.check_once(spec, validate, marks=tmp_path)

    invalid = {"openapi": "3.0.3", "info": {"title": "broken"}, "paths": {"/x": {"get": 1}}}
    valid = {"openapi": "3.0.3", "info": {"title": "fine", "version": "1"}, "paths": {}}
    internals.check_specs_with(check)
    try:
        for _attempt in range(2):
            with pytest.raises(InvalidSpecification):
                Specification.load(copy.deepcopy(invalid))
        Specification.load(copy.deepcopy(valid))
    finally:
        internals.check_specs_with(functools.partial(checked_specs.check_once, marks=MARKS))
    assert seen == ["broken", "broken", "fine"]
    # Only the valid contract is remembered for the machine's other processes.
    assert len(list(tmp_path.iterdir())) == 1


def test_connexion_reads_a_security_function_signature_with_accepts_kwarg():
    def check(token, required_scopes):
        return {}

    assert internals.accepts_kwarg(check, "required_scopes") is True
    assert internals.accepts_kwarg(check, "request") is False


def test_connexion_names_a_bracketed_query_parameter_with_sanitized():
    # The listing maps these names back to columns: the mapping must be Connexion's own.
    assert internals.sanitized("price_cents[gte]") == "price_cents_gte"
    assert internals.sanitized("sku") == "sku"


def test_the_router_and_security_notes_reach_the_layers_outside(app, client):
    """The scope keys read by internals.routed_to and internals.token_info: captured from a
    layer outside Connexion's router, after the request, as the observability layer reads
    them."""
    seen = {}
    assert client.get("/v1/products").status_code == 200  # the stack is built by then
    outer = app.middleware.app

    async def capture(scope, receive, send):
        internals.share_request_notes(scope)
        await outer(scope, receive, send)
        if scope["type"] == "http":
            seen["routed_to"] = internals.routed_to(scope)
            seen["token_info"] = internals.token_info(scope)

    app.middleware.app = capture
    try:
        assert client.get("/v1/products").status_code == 200
    finally:
        app.middleware.app = outer
    assert seen["routed_to"] == ("/v1", "handlers.products.list_products")
    assert seen["token_info"]["sub"]


def test_peewees_pool_hooks_are_the_ones_the_idle_check_overrides():
    """IdleCheckedPool overrides `_can_reuse`, `_is_closed` and `_close_raw`, keys connections
    with `conn_key` and reads their transaction status through `_adapter`: all must still be so."""
    for name in ("_can_reuse", "_is_closed", "_close_raw"):
        assert list(inspect.signature(getattr(PooledPostgresqlDatabase, name)).parameters) == [
            "self",
            "conn",
        ], name
    database = PooledPostgresqlDatabase("unused")
    assert database.conn_key(database) == id(database)
    assert callable(database._adapter.txn_status)
    assert database._adapter.txn_idle is not None


def test_a_connection_given_back_a_moment_ago_is_reused_without_peewees_check(
    database_url, monkeypatch
):
    if not database_url.startswith("postgresql"):
        pytest.skip("the pool is PostgreSQL's")
    from models.db import open_database

    checks = []
    peewees_check = PooledPostgresqlDatabase._is_closed

    def counted_check(self, conn):
        checks.append(conn)
        return peewees_check(self, conn)

    monkeypatch.setattr(PooledPostgresqlDatabase, "_is_closed", counted_check)
    db = open_database(database_url, pool_size=1)
    assert isinstance(db, internals.IdleCheckedPool)
    db.connect()
    first = db.connection()
    db.close()  # back to the pool, a moment ago
    db.connect()
    assert db.connection() is first
    assert checks == []  # reused on the driver's own state: Peewee's round trip skipped
    db.close()
    db.close_all()


def test_every_query_of_a_model_passes_through_its_database_proxy(tmp_path):
    """models/routing.py sends a read-routed request's queries to its replica from the proxy the
    models are bound to: Peewee must call the proxy's execute() for a model's queries, and its
    atomic() for a transaction. Two SQLite files stand in for a primary and a replica."""
    primary, replica = (open_database(f"sqlite:///{tmp_path}/{name}.db") for name in "ab")
    bound = database.obj
    try:
        for db, sku in ((primary, "ON-PRIMARY"), (replica, "ON-REPLICA")):
            use(db)
            db.create_tables([Product])
            Product.create(sku=sku, name=sku, price_cents=1)
        use(primary)
        route = Route(replica)
        token = current_route.set(route)
        try:
            assert [p.sku for p in Product.select()] == ["ON-REPLICA"]
            assert Product.select().count() == 1 and route.replica is replica
            # A plan of a SELECT runs nothing: it stays a read (a planned list count).
            database.execute_sql("EXPLAIN QUERY PLAN SELECT * FROM product")
            assert route.replica is replica and not route.wrote
            Product.create(sku="WRITTEN", name="w", price_cents=1)
            assert route.replica is None and route.wrote
            assert {p.sku for p in Product.select()} == {"ON-PRIMARY", "WRITTEN"}
        finally:
            current_route.reset(token)
        route = Route(replica)
        token = current_route.set(route)
        try:
            with database.atomic():
                assert route.replica is None
                assert Product.select().count() == 2
        finally:
            current_route.reset(token)
    finally:
        for db in (primary, replica):
            db.close()
        use(bound)


def test_a_connection_closed_idle_is_forgotten_by_the_idle_check(database_url):
    if not database_url.startswith("postgresql"):
        pytest.skip("the pool is PostgreSQL's")
    db = open_database(database_url, pool_size=2)
    db.connect()
    db.close()  # back to the pool: its return remembered
    assert db.returns_remembered == 1
    db.close_idle()  # as after a database outage
    assert db.returns_remembered == 0
    db.connect()  # a new connection, checked by Peewee as usual
    db.execute_sql("SELECT 1")
    db.close()
    db.close_all()
