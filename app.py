"""The application factory: the Connexion app built from spec/openapi.yaml, wired to the
handlers, the database and the cross-cutting middleware. Serve it with
`uvicorn --factory app:create_app`."""

import logging
import pathlib

import connexion
import yaml
from connexion.middleware import MiddlewarePosition
from connexion.options import SwaggerUIOptions

from models import User
from models.db import close_connection, database, open_database, use
from shopapi import problems, security
from shopapi.body_limit import BodyLimitMiddleware
from shopapi.jsonifier import CompactJsonifier
from shopapi.list_contract import expand
from shopapi.request_id import RequestIdMiddleware
from shopapi.resolver import HandlerResolver
from shopapi.settings import Settings
from shopapi.tokens import AccessTokens
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
    # The well-known URIs live at the root, outside the versioned API, with no docs of their own.
    app.add_api(
        yaml.safe_load((SPEC_DIR / "well-known.yaml").read_text()),
        resolver=HandlerResolver(),
        strict_validation=True,
        validate_responses=settings.validate_responses,
        swagger_ui_options=SwaggerUIOptions(swagger_ui=False, serve_spec=False),
    )
    app.app.teardown_request(close_connection)
    app.app.config["CURSOR_SECRET"] = settings.cursor_secret
    app.app.config["REFRESH_TOKEN_TTL"] = settings.refresh_token_ttl
    security.install(app, AccessTokens(settings))
    if settings.admin_email:
        with database.connection_context():
            User.ensure_admin(settings.admin_email, settings.admin_password)

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
