"""The application factory: the Connexion app built from the specs in spec/ (each API version's
and the root ones), wired to the
handlers, the database and the cross-cutting middleware. Serve it with
`uvicorn --factory app:create_app`."""

import logging
import pathlib
import warnings

# Connexion imports starlette.testclient (connexion/apps/abstract.py) for its test client, and
# Starlette warns there, at every start of the server, that it found httpx rather than httpx2:
# nothing an operator can act on. That warning only, from that import only.
with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore",
        message="Using `httpx` with `starlette.testclient` is deprecated",
        module="connexion.apps.abstract",
    )
    import connexion

from asgi_correlation_id import CorrelationIdMiddleware
from connexion.middleware import MiddlewarePosition
from connexion.options import SwaggerUIOptions

from models import User, demo
from models.db import close_connection, database, open_database, use
from shopapi.auth import security
from shopapi.auth.tokens import AccessTokens
from shopapi.contract import served, spec_files
from shopapi.contract.list_language import expand
from shopapi.contract.operations import Operations, operations_of
from shopapi.contract.resolver import HandlerResolver
from shopapi.contract.uri_parsing import ArrayFormsURIParser
from shopapi.contract.validation import validator_map
from shopapi.pipeline.body_limit import BodyLimitMiddleware
from shopapi.pipeline.callers import ForwardedHeadersMiddleware, TrustedProxies
from shopapi.pipeline.cors import Cors
from shopapi.pipeline.deprecation import DeprecationMiddleware
from shopapi.pipeline.exact_paths import exact_routing, no_merge_slashes
from shopapi.pipeline.idempotency import IdempotencyMiddleware
from shopapi.pipeline.media_types import MediaTypeMiddleware
from shopapi.pipeline.observability import ObservabilityMiddleware
from shopapi.pipeline.rate_limits import (
    AttemptLimitMiddleware,
    FailedAuthMiddleware,
    LimitCounter,
    RateLimitHeadersMiddleware,
    RateLimitMiddleware,
    scaled,
)
from shopapi.pipeline.versions import SPEC_FILES, ApiVersionMiddleware
from shopapi.pipeline.wsgi_bridge import WSGIBridge
from shopapi.settings import ConfigurationError, Settings
from shopapi.telemetry import logs
from shopapi.telemetry.alerts import AlertWebhook
from shopapi.telemetry.request_id import is_sane_request_id, new_request_id
from shopapi.web import problems
from shopapi.web.jsonifier import CompactJsonifier

SPEC_DIR = pathlib.Path(__file__).parent / "spec"


def _load(name: str) -> dict:
    return spec_files.load(SPEC_DIR / name)


def _base_path(spec: dict) -> str:
    # Given to Connexion explicitly: left to read it from `servers`, Connexion routes every
    # request to an API served at the root ("/") and none to the others.
    return spec["servers"][0]["url"].rstrip("/")


def create_app(settings: Settings | None = None) -> connexion.FlaskApp:
    logs.configure()
    settings = settings or Settings.from_env()
    if settings.default_api_version not in SPEC_FILES:
        raise ConfigurationError(
            f"API_DEFAULT_VERSION {settings.default_api_version} is not served: "
            f"{', '.join(map(str, SPEC_FILES))}"
        )
    # Each version's contract, with the list language written into it: served as it is, and
    # enforced with API keys needing the operations' OAuth scopes.
    api_specs = [expand(_load(name)) for name in SPEC_FILES.values()]
    contract_documents = served.documents(api_specs)
    api_specs = [security.with_api_key_scopes(spec) for spec in api_specs]
    use(open_database(settings.database_url, settings.database_pool_size))

    app = connexion.FlaskApp(
        __name__,
        specification_dir=SPEC_DIR,
        jsonifier=CompactJsonifier(),
        validator_map=validator_map,
        security_map=security.SECURITY_MAP,
        uri_parser_class=ArrayFormsURIParser,
    )
    no_merge_slashes(app)
    # Flask behind a bridge whose threads match the database pool and that hands each response
    # back in one piece (shopapi/pipeline/wsgi_bridge.py). FlaskApp offers no option for it: its
    # inner app is the place.
    app._middleware_app.asgi_app = WSGIBridge(app.app.wsgi_app, settings.database_pool_size)
    # The well-known URIs and the metrics live at the root, outside the versioned API, with no
    # docs of their own. /metrics takes an admin's token or API key, or METRICS_TOKEN.
    root_specs = [_load("well-known.yaml"), security.with_api_key_scopes(_load("metrics.yaml"))]
    no_docs = SwaggerUIOptions(swagger_ui=False, serve_spec=False)
    # The docs UI reads the contract from ServedContractMiddleware, not from Connexion.
    docs_only = SwaggerUIOptions(serve_spec=False)
    served_specs = [
        *((spec, docs_only) for spec in api_specs),
        *((root, no_docs) for root in root_specs),
    ]
    for served_spec, docs in served_specs:
        app.add_api(
            served_spec,
            base_path=_base_path(served_spec),
            resolver=HandlerResolver(served_spec),
            strict_validation=True,
            validate_responses=settings.validate_responses,
            swagger_ui_options=docs,
        )
    app.app.teardown_request(close_connection)
    app.app.config["CURSOR_SECRET"] = settings.cursor_secret
    app.app.config["REFRESH_TOKEN_TTL"] = settings.refresh_token_ttl
    app.app.config["LOW_STOCK_THRESHOLD"] = settings.low_stock_threshold
    app.app.config["WEBHOOK_ALLOW_PRIVATE"] = settings.webhook_allow_private
    security.install(app, AccessTokens(settings), settings.metrics_token)
    if settings.admin_email:
        with database.connection_context():
            User.ensure_admin(settings.admin_email, settings.admin_password)
    demo.warn_of_published_passwords(settings)

    _add_traffic_middleware(app, settings, api_specs, root_specs)
    app.add_middleware(
        served.ServedContractMiddleware,
        position=MiddlewarePosition.BEFORE_SWAGGER,
        documents=contract_documents,
    )
    problems.register(app, api_specs)
    exact_routing(app)  # last: it replaces the Connexion middleware add_middleware looks for
    # Connexion warns on every request to an operation that accepts two media types (our
    # merge-patch and plain JSON PATCH bodies); that is by design here.
    logging.getLogger("connexion.operations.openapi3").setLevel(logging.ERROR)
    return app


def _add_traffic_middleware(
    app: connexion.FlaskApp, settings: Settings, api_specs: list[dict], root_specs: list[dict]
):
    """Outside Connexion's exception handling, so that every response passes through them (an
    error, a preflight, a 429): the client's address behind a trusted proxy, the request id,
    the measurements, the rate-limit headers, CORS, the version (which gives an unversioned path
    its version before routing) and the deprecation headers. Then, once the operation is known,
    the body limit and the count of refused credentials before the security checks, and the
    client's rate limit after them (and the way to the per-account attempt limits, for the
    handlers that count attempts), then the body's media type read as RFC 9110 reads it, for
    the request validation; last, once the request is valid, Idempotency-Key replays, just
    outside the handler."""
    operations = Operations([*api_specs, *root_specs])
    api_spec = api_specs[0]
    counter = LimitCounter(settings.rate_limit_storage_uri)
    alerts = AlertWebhook(settings.alert_webhook_url) if settings.alert_webhook_url else None

    if settings.forwarded_allow_ips:
        # First: every layer after it sees the client's address, not the proxy's.
        app.add_middleware(
            ForwardedHeadersMiddleware,
            position=MiddlewarePosition.BEFORE_EXCEPTION,
            proxies=TrustedProxies(settings.forwarded_allow_ips),
        )
    app.add_middleware(
        CorrelationIdMiddleware,
        position=MiddlewarePosition.BEFORE_EXCEPTION,
        header_name="X-Request-ID",
        generator=new_request_id,
        validator=is_sane_request_id,
    )
    app.add_middleware(
        ObservabilityMiddleware,
        position=MiddlewarePosition.BEFORE_EXCEPTION,
        operations=operations,
        slow_request_ms=settings.slow_request_ms,
        alerts=alerts,
    )
    app.add_middleware(RateLimitHeadersMiddleware, position=MiddlewarePosition.BEFORE_EXCEPTION)
    if settings.cors_origins:
        app.add_middleware(
            Cors,
            position=MiddlewarePosition.BEFORE_EXCEPTION,
            origins=settings.cors_origins,
            allow_credentials=settings.cors_allow_credentials,
        )
    app.add_middleware(
        ApiVersionMiddleware,
        position=MiddlewarePosition.BEFORE_EXCEPTION,
        served=tuple(SPEC_FILES),
        default=settings.default_api_version,
        unversioned=tuple(op.route for spec in root_specs for op in operations_of(spec)),
    )
    app.add_middleware(
        DeprecationMiddleware, position=MiddlewarePosition.BEFORE_EXCEPTION, operations=operations
    )
    app.add_middleware(
        BodyLimitMiddleware,
        position=MiddlewarePosition.BEFORE_SECURITY,
        max_bytes=settings.max_body_bytes,
    )
    failed_auth_limit = api_spec.get("x-rate-limit-failed-auth")
    if failed_auth_limit:
        app.add_middleware(
            FailedAuthMiddleware,
            position=MiddlewarePosition.BEFORE_SECURITY,
            counter=counter,
            operations=operations,
            limit=scaled(failed_auth_limit, settings.rate_limit_scale),
        )
    app.add_middleware(
        RateLimitMiddleware,
        position=MiddlewarePosition.BEFORE_VALIDATION,
        counter=counter,
        operations=operations,
        scale=settings.rate_limit_scale,
    )
    app.add_middleware(
        AttemptLimitMiddleware,
        position=MiddlewarePosition.BEFORE_VALIDATION,
        counter=counter,
        operations=operations,
        scale=settings.rate_limit_scale,
    )
    app.add_middleware(
        MediaTypeMiddleware, position=MiddlewarePosition.BEFORE_VALIDATION, operations=operations
    )
    app.add_middleware(
        IdempotencyMiddleware,
        position=MiddlewarePosition.BEFORE_CONTEXT,
        operations=operations,
        secret=settings.cursor_secret,
        error_handlers=problems.handlers(api_specs),
    )
