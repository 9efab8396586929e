"""The library internals shopapi/internals/ relies on, one class per library, each held to what
the service needs of it: when a release of Connexion, uvicorn, Starlette, a2wsgi, Peewee or limits
changes one, the test names the library and the use rather than a request failing somewhere
else."""

import asyncio
import copy
import datetime
import functools
import inspect
import re

import peewee
import pytest
from connexion.exceptions import InvalidSpecification
from playhouse.shortcuts import model_to_dict
from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware

from app import SPEC_DIR
from models import Product, base, money
from models.db import database, open_database, use
from models.pool import IdleCheckedPool
from models.routing import Route, current_route
from shopapi.contract import checked_specs
from shopapi.contract.uri_parsing import ArrayFormsURIParser
from shopapi.internals import a2wsgi as a2wsgi_internals
from shopapi.internals import connexion as connexion_internals
from shopapi.internals import limits as limits_internals
from shopapi.internals import peewee as peewee_internals
from shopapi.internals import starlette as starlette_internals
from shopapi.internals import uvicorn as uvicorn_internals
from shopapi.pipeline.wsgi_bridge import WSGIBridge


def _missing(relied_upon: list) -> list[str]:
    """Each (owner, name, parameters) of an internals module's RELIED_UPON the installed library
    no longer has as relied upon: a method or function with other parameters, an attribute
    neither on the owner nor set by its (or a base's) code."""
    missing = []
    for owner, name, parameters in relied_upon:
        where = f"{getattr(owner, '__qualname__', owner.__name__)}.{name}"
        if parameters is None:
            sources = [
                inspect.getsource(k)
                for k in getattr(owner, "__mro__", [owner])
                if k is not object and not k.__module__.startswith("shopapi")
            ]
            set_by_code = any(re.search(rf"self\.{name}\s*[:=]", src) for src in sources)
            if not (hasattr(owner, name) or set_by_code):
                missing.append(f"{where}: gone")
        elif not hasattr(owner, name):
            missing.append(f"{where}: gone")
        else:
            found = list(inspect.signature(getattr(owner, name)).parameters)
            if found != parameters:
                missing.append(f"{where}: takes {found}, relied upon as {parameters}")
    return missing


class TestConnexion:
    def test_the_private_names_relied_upon_are_still_there(self):
        assert _missing(connexion_internals.RELIED_UPON) == []

    def test_flask_is_served_through_our_bridge(self, app, client):
        """replace_flask_bridge sets FlaskApp's private `_middleware_app.asgi_app`: the request
        below must cross the bridge set there to reach Flask."""
        bridge = connexion_internals.flask_bridge(app)
        assert isinstance(bridge, WSGIBridge)
        crossed = []

        async def counted(scope, receive, send):
            crossed.append(scope["path"])
            await bridge(scope, receive, send)

        connexion_internals.replace_flask_bridge(app, counted)
        try:
            assert client.get("/v1/products").status_code == 200
        finally:
            connexion_internals.replace_flask_bridge(app, bridge)
        assert crossed == ["/v1/products"]

    def test_connexion_checks_each_spec_through_check_specs_with(self, tmp_path):
        """Connexion's Specification runs its schema check in `_validate_spec`: through ours,
        each spec it loads reaches the check given, and an invalid one is still refused (and,
        being invalid, never remembered as valid)."""
        seen = []

        def check(spec, validate):
            seen.append(spec["info"]["title"])
            checked_specs.check_once(spec, validate, marks=tmp_path)

        invalid = {"openapi": "3.0.3", "info": {"title": "broken"}, "paths": {"/x": {"get": 1}}}
        valid = {"openapi": "3.0.3", "info": {"title": "fine", "version": "1"}, "paths": {}}
        connexion_internals.check_specs_with(check)
        try:
            for _attempt in range(2):
                with pytest.raises(InvalidSpecification):
                    connexion_internals.load_spec(copy.deepcopy(invalid))
            connexion_internals.load_spec(copy.deepcopy(valid))
        finally:
            connexion_internals.check_specs_with(
                functools.partial(checked_specs.check_once, marks=SPEC_DIR / ".checked")
            )
        assert seen == ["broken", "broken", "fine"]
        # Only the valid contract is remembered for the machine's other processes.
        assert len(list(tmp_path.iterdir())) == 1

    def test_a_security_function_signature_is_read_with_accepts_kwarg(self):
        def check(token, required_scopes):
            return {}

        assert connexion_internals.accepts_kwarg(check, "required_scopes") is True
        assert connexion_internals.accepts_kwarg(check, "request") is False
        handlers = connexion_internals.security_handlers_reading_signatures_once()
        assert {"oauth2", "apiKey", "bearer"} <= handlers.keys()

    def test_a_bracketed_query_parameter_is_named_with_sanitized(self):
        # The listing maps these names back to columns: the mapping must be Connexion's own.
        assert connexion_internals.sanitized("price_cents[gte]") == "price_cents_gte"
        assert connexion_internals.sanitized("sku") == "sku"

    def test_the_router_and_security_notes_reach_the_layers_outside(self, app, client):
        """The scope keys read by routed_to and token_info: captured from a layer outside
        Connexion's router, after the request, as the observability layer reads them."""
        seen = {}
        assert client.get("/v1/products").status_code == 200  # the stack is built by then
        outer = app.middleware.app

        async def capture(scope, receive, send):
            connexion_internals.share_request_notes(scope)
            await outer(scope, receive, send)
            if scope["type"] == "http":
                seen["routed_to"] = connexion_internals.routed_to(scope)
                seen["token_info"] = connexion_internals.token_info(scope)

        app.middleware.app = capture
        try:
            assert client.get("/v1/products").status_code == 200
        finally:
            app.middleware.app = outer
        assert seen["routed_to"] == ("/v1", "handlers.products.list_products")
        assert seen["token_info"]["sub"]

    def test_the_uri_parser_reads_the_maps_and_joins_repeated_values_as_hooked(self):
        """Connexion's parser reads `_param_defns` and calls `_resolve_param_duplicates`:
        repeated keys of an array are joined, then split as a comma list."""
        parser = ArrayFormsURIParser(
            [
                {
                    "name": "ids",
                    "in": "query",
                    "schema": {"type": "array", "items": {"type": "string"}},
                    "style": "form",
                    "explode": False,
                },
                {"name": "sku", "in": "query", "schema": {"type": "string"}},
            ],
            {},
        )
        assert parser.resolve_query({"ids": ["a,b", "c"], "sku": ["x"]}) == {
            "ids": ["a", "b", "c"],
            "sku": "x",
        }

    def test_the_validators_hooks_are_the_ones_connexion_calls(self, client):
        """The body validator's `_parse` and `_validate`, the form validator's `_validate` and
        the parameter validator built by our __init__: each refusal below is worded by ours."""
        bad_text = client.post(
            "/v1/products", content=b"\xff", headers={"Content-Type": "application/json"}
        )
        assert bad_text.status_code == 400
        assert "not valid UTF-8" in bad_text.json()["detail"]
        malformed = client.post(
            "/v1/products", content=b"{", headers={"Content-Type": "application/json"}
        )
        assert "not valid JSON" in malformed.json()["detail"]
        token = client.post("/v1/oauth/token", data={"grant_type": "implicit"})
        assert token.json()["error"] == "unsupported_grant_type"
        repeated = client.get("/v1/products?sku=A&sku=B")
        assert repeated.status_code == 400
        assert repeated.json()["errors"] == [
            {"parameter": "sku", "detail": "is given more than once"}
        ]


class TestUvicorn:
    def test_the_private_names_relied_upon_are_still_there(self):
        assert _missing(uvicorn_internals.RELIED_UPON) == []

    def test_a_status_line_is_uvicorns(self):
        assert uvicorn_internals.status_line(431) == (
            b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
        )

    def test_flow_control_names_its_transport_and_writable_event(self):
        class Transport:
            def pause_reading(self):
                pass

            def resume_reading(self):
                pass

        transport = Transport()
        flow = uvicorn_internals.FlowControl(transport)
        assert flow.transport is transport
        assert isinstance(flow.writable, asyncio.Event) and flow.writable.is_set()
        flow.pause_writing()
        assert not flow.writable.is_set()


class TestStarlette:
    def test_the_private_names_relied_upon_are_still_there(self):
        assert _missing(starlette_internals.RELIED_UPON) == []

    def test_a_preflight_is_answered_by_preflight_response(self):
        cors = CORSMiddleware(None, allow_origins=["https://shop.example"], allow_methods=["GET"])
        asked = {"origin": "https://shop.example", "access-control-request-method": "GET"}
        allowed = starlette_internals.preflight_response(cors, Headers(asked))
        assert allowed.status_code == 200
        refused = starlette_internals.preflight_response(
            cors, Headers({**asked, "origin": "https://elsewhere.example"})
        )
        assert refused.status_code == 400 and b"origin" in refused.body


class TestA2wsgi:
    def test_the_private_names_relied_upon_are_still_there(self):
        assert _missing(a2wsgi_internals.RELIED_UPON) == []

    def test_a_requests_environ_is_built_as_pep_3333_says(self):
        scope = {
            "type": "http",
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/orders",
            "root_path": "",
            "query_string": b"a=1",
            "headers": [(b"content-type", b"application/json"), (b"content-length", b"2")],
            "server": ("testserver", 80),
            "client": ("127.0.0.1", 5000),
        }
        environ = a2wsgi_internals.wsgi_environ(scope, b"{}")
        assert environ["REQUEST_METHOD"] == "POST"
        assert environ["PATH_INFO"] == "/v1/orders"
        assert environ["QUERY_STRING"] == "a=1"
        assert environ["CONTENT_TYPE"] == "application/json"
        assert environ["wsgi.input"].read() == b"{}"


class TestLimits:
    def test_the_private_names_relied_upon_are_still_there(self):
        assert _missing(limits_internals.RELIED_UPON) == []


class TestPeewee:
    def test_the_private_names_relied_upon_are_still_there(self):
        assert _missing(peewee_internals.RELIED_UPON) == []

    def test_a_connection_given_back_a_moment_ago_is_reused_without_peewees_check(
        self, database_url, monkeypatch
    ):
        if not database_url.startswith("postgresql"):
            pytest.skip("the pool is PostgreSQL's")
        # Peewee asks `_is_closed` before reusing a connection: the pool's known_open answers.
        answers = []
        known_open = IdleCheckedPool.known_open

        def recorded(self, conn):
            answers.append(known_open(self, conn))
            return answers[-1]

        monkeypatch.setattr(IdleCheckedPool, "known_open", recorded)
        db = open_database(database_url, pool_size=1)
        assert isinstance(db, IdleCheckedPool)
        db.connect()
        first = db.connection()
        db.close()  # back to the pool, a moment ago
        db.connect()
        assert db.connection() is first
        assert answers == [True]  # reused on the driver's own state: Peewee's round trip skipped
        db.close()
        db.close_all()

    def test_a_connection_closed_idle_is_forgotten_by_the_idle_check(self, database_url):
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

    def test_rows_of_a_cursor_are_the_querys_own_rows(self, tmp_path):
        """A list's page runs from its statement, rendered once: `rows_of` makes of the cursor
        what the query itself makes of its rows, models with their fields' conversions and a
        computed column's."""
        db = open_database(f"sqlite:///{tmp_path}/rows.db")
        bound = database.obj
        try:
            use(db)
            db.create_tables([Product])
            for n in range(3):
                Product.create(sku=f"ROW-{n}", name=f"Row {n}", price_cents=100 + n)
            doubled = (Product.price_cents * 2).alias("doubled")
            query = Product.select(Product, doubled).order_by(Product.id.desc())
            sql, params = query.sql()
            rows = peewee_internals.rows_of(query, database.execute_sql(sql, params))
            expected = list(query.clone())
            assert [type(row) for row in rows] == [Product] * 3
            assert [(r.sku, r.created_at, r.doubled) for r in rows] == [
                (r.sku, r.created_at, r.doubled) for r in expected
            ]
            assert isinstance(rows[0].created_at, datetime.datetime)
        finally:
            db.close()
            use(bound)

    @pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
    def test_a_statement_without_its_order_by_is_the_unordered_querys_own(self, tmp_path, kind):
        """A list's count runs from its statement with the ORDER BY cut off: what Peewee renders
        for the query unordered, its parameters included, whatever the sort's own parameters
        and an ORDER BY inside a subquery. Rendered only: no connection."""
        db = (
            open_database(f"sqlite:///{tmp_path}/order.db")
            if kind == "sqlite"
            else peewee.PostgresqlDatabase("never-connected")
        )
        bound = database.obj
        try:
            use(db)
            amount = money.comparable(Product.price_cents, Product.currency)
            cheapest = Product.select(Product.id).order_by(Product.price_cents).limit(5)
            queries = [
                Product.select(),
                Product.select().where(Product.category == "books", Product.stock > 3),
                Product.select(Product, amount.alias("price_amount")).where(amount >= 5000),
                Product.select().where(Product.id.in_(cheapest)),
            ]
            orders = [
                [Product.id],
                [Product.description.desc(nulls="FIRST"), Product.id],
                [amount.asc(nulls="LAST"), Product.id.desc()],
                [peewee.Case(Product.category, [("books", 0)], 1), Product.id],  # a parameter
            ]
            for query in queries:
                for order in orders:
                    ordered = query.order_by(*order)
                    cut = peewee_internals.without_order_by(ordered.sql(), db.param)
                    assert cut[0] == query.sql()[0] and list(cut[1]) == list(query.sql()[1])
        finally:
            use(bound)

    def test_get_by_id_from_its_sql_rendered_once_reads_as_peewees_own(self, tmp_path):
        """models/base.py's `get_by_id` runs SQL rendered once through `rows_of`: the row it
        reads is Peewee's own, every time, and a missing one is the model's DoesNotExist."""
        db = open_database(f"sqlite:///{tmp_path}/by_id.db")
        bound = database.obj
        try:
            use(db)
            db.create_tables([Product])
            made = [Product.create(sku=f"ID-{n}", name="n", price_cents=n) for n in range(3)]
            for product in [*made, made[0]]:
                read = Product.get_by_id(product.id)
                own = Product.get(Product.id == product.id)
                assert model_to_dict(read) == model_to_dict(own) and read.created_at.tzinfo
            with pytest.raises(Product.DoesNotExist):
                Product.get_by_id(max(p.id for p in made) + 1)
        finally:
            db.close()
            use(bound)

    def test_where_in_from_its_sql_rendered_once_reads_as_peewees_own(self, tmp_path):
        """models/base.py's `where_in` runs SQL rendered once per number of values: each call
        reads Peewee's own rows for its own values, in id order, however many (beyond those it
        renders once too)."""
        db = open_database(f"sqlite:///{tmp_path}/where_in.db")
        bound = database.obj
        try:
            use(db)
            db.create_tables([Product])
            made = [
                Product.create(sku=f"IN-{n}", name="n", price_cents=n)
                for n in range(base.RENDERED_ONCE_UP_TO + 2)
            ]
            ids = [product.id for product in made]
            for wanted in ([ids[2], ids[0]], [ids[1], ids[3]], ids, [ids[4]], []):
                own = Product.select().where(Product.id.in_(wanted)).order_by(Product.id)
                read = base.where_in(Product.id, wanted)
                assert [model_to_dict(p) for p in read] == [model_to_dict(p) for p in own]
                assert all(isinstance(p, Product) and p.created_at.tzinfo for p in read)
        finally:
            db.close()
            use(bound)

    def test_every_query_of_a_model_passes_through_its_database_proxy(self, tmp_path):
        """models/routing.py sends a read-routed request's queries to its replica from the proxy
        the models are bound to: Peewee must call the proxy's execute() for a model's queries,
        and its atomic() for a transaction. Two SQLite files stand in for a primary and a
        replica."""
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
