"""The benchmark's baseline: the list query of the load mix served by plain Flask and Peewee,
with none of the contract's layers (no Connexion, validation, security, rate limits, metrics or
logs). What it costs per request is the floor that shopapi's cost is compared with.

    BENCH_DATABASE_URL=... gunicorn -w 2 -b 127.0.0.1:8100 'bench.baseline_app:create_app()'

It answers `GET /v1/products?category=...&sort=-price_cents&per_page=20[&page=N]` with the same
envelope and the same query (the filter, the sort with id breaking ties, the page, the total).
"""

import math
import os

import flask
import orjson

from handlers.products import represent
from models import Product
from models.db import close_connection, open_database, use
from shopapi.web.jsonifier import OPTIONS

URL = os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/shopapi_bench")


def list_products():
    args = flask.request.args
    per_page = min(int(args.get("per_page", 20)), 100)
    page = max(int(args.get("page", 1)), 1)
    query = Product.select()
    if "category" in args:
        query = query.where(Product.category == args["category"])
    total = query.count()
    order = Product.price_cents.desc(nulls="FIRST")
    rows = query.order_by(order, Product.id).paginate(page, per_page)
    body = {
        # shopapi's own representation (every field), without a version's shape.
        "data": [represent(row) for row in rows],
        "meta": {
            "page": page,
            "per_page": per_page,
            "total": total,
            "total_pages": math.ceil(total / per_page),
        },
    }
    return flask.Response(orjson.dumps(body, option=OPTIONS), mimetype="application/json")


def create_app() -> flask.Flask:
    use(open_database(URL))
    app = flask.Flask(__name__)
    app.add_url_rule("/v1/products", view_func=list_products)
    app.teardown_request(close_connection)
    return app
