"""The floor of the fixed stack: the baseline's list (bench/baseline_app.py), the very function,
served as shopapi is served (gunicorn's uvicorn workers, a Connexion FlaskApp routing one operation
of a contract to Flask on the threads of shopapi's bridge) and with none of shopapi's features: no
security, parameter validation, limits, metrics, logs or layers of its own. What it costs beyond
the baseline is the stack's, before any feature.

    BENCH_DATABASE_URL=... gunicorn -w 2 -k uvicorn_worker.UvicornWorker \
        -b 127.0.0.1:8104 'bench.floor_app:create_app()'
"""

import connexion

from bench import baseline_app
from models.db import close_connection, open_database, use
from shopapi.internals import connexion as connexion_internals
from shopapi.pipeline.wsgi_bridge import WSGIBridge
from shopapi.settings import Settings

# One operation, no parameters declared: the handler reads the query as the baseline's does.
CONTRACT = {
    "openapi": "3.0.3",
    "info": {"title": "The stack's floor", "version": "1"},
    "paths": {
        "/v1/products": {
            "get": {
                "operationId": "bench.baseline_app.list_products",
                "responses": {"200": {"description": "A page of products."}},
            }
        }
    },
}


def create_app() -> connexion.FlaskApp:
    pool_size = Settings().database_pool_size
    use(open_database(baseline_app.URL, pool_size))
    app = connexion.FlaskApp(__name__)
    # shopapi's bridge to Flask, cheaper than Connexion's own (docs/pipeline.md): the floor is
    # the stack as shopapi runs it.
    connexion_internals.replace_flask_bridge(app, WSGIBridge(app.app.wsgi_app, pool_size))
    app.add_api(CONTRACT)
    app.app.teardown_request(close_connection)
    return app
