"""The application factory: the Connexion app built from spec/openapi.yaml, wired to the
handlers, the database and the cross-cutting middleware. Serve it with
`uvicorn --factory app:create_app`."""

import logging
import pathlib

import connexion
import yaml
from connexion.middleware import MiddlewarePosition

from models.db import close_connection, open_database, use
from shopapi import problems
from shopapi.body_limit import BodyLimitMiddleware
from shopapi.jsonifier import CompactJsonifier
from shopapi.list_contract import expand
from shopapi.request_id import RequestIdMiddleware
from shopapi.resolver import HandlerResolver
from shopapi.settings import Settings
from shopapi.validation import validator_map

SPEC_DIR = pathlib.Path(__file__).parent / "spec"


def create_app(settings: Settings | None = None) -> connexion.FlaskApp:
    settings = settings or Settings.from_env()
    spec = expand(yaml.safe_load((SPEC_DIR / "openapi.yaml").read_text()))
    use(open_database(settings.database_url, settings.database_pool_size))

    app = connexion.FlaskApp(
        __name__,
        specification_dir=SPEC_DIR,
        jsonifier=CompactJsonifier(),
        validator_map=validator_map,
    )
    app.add_api(
        spec,
        resolver=HandlerResolver(),
        strict_validation=True,
        validate_responses=settings.validate_responses,
    )
    app.app.teardown_request(close_connection)
    app.app.config["CURSOR_SECRET"] = settings.cursor_secret

    app.add_middleware(
        BodyLimitMiddleware,
        position=MiddlewarePosition.BEFORE_ROUTING,
        max_bytes=settings.max_body_bytes,
    )
    app.add_middleware(RequestIdMiddleware, position=MiddlewarePosition.BEFORE_EXCEPTION)
    problems.register(app, spec)
    # Connexion warns on every request to an operation that accepts two media types (our
    # merge-patch and plain JSON PATCH bodies); that is by design here.
    logging.getLogger("connexion.operations.openapi3").setLevel(logging.ERROR)
    return app
