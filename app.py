"""The application factory: the Connexion app built from the specs in spec/ (each API version's
and the root ones), wired to the
handlers, the database and the cross-cutting middleware. Serve it with
`uvicorn --factory app:create_app`."""

import contextlib
import datetime
import logging
import threading
import warnings

# Connexion imports starlette.testclient (connexion/apps/abstract.py) for its test client, and
# Starlette warns there, at every start of the server, that it found httpx rather than httpx2:
# nothing an operator can act on. That warning only, from that import only (shopapi/__init__.py
# filters it for the processes that import Connexion through our modules before app.py).
with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore",
        message="Using `httpx` with `starlette.testclient` is deprecated",
        module="connexion.apps.abstract",
    )
    import connexion

from functools import partial
from urllib.parse import urlsplit

import peewee
from asgi_correlation_id import CorrelationIdMiddleware
from connexion.middleware.context import ContextMiddleware
from connexion.middleware.exceptions import ExceptionMiddleware
from connexion.middleware.lifespan import LifespanMiddleware
from connexion.middleware.request_validation import RequestValidationMiddleware
from connexion.middleware.response_validation import ResponseValidationMiddleware
from connexion.middleware.security import SecurityMiddleware
from connexion.middleware.server_error import ServerErrorMiddleware
from connexion.options import SwaggerUIOptions

from handlers.order_holds import HoldSweeper
from models import User, demo, off_loop
from models.bounds import Bounds
from models.db import close_connection, database, error_summary, open_database, use
from models.round_trip import RoundTrip
from models.start_up import StartUpWork
from shopapi import docs_ui
from shopapi.auth import security
from shopapi.auth.revocations import Revocations
from shopapi.auth.tokens import AccessTokens
from shopapi.contract import checked_specs, served, spec_files
from shopapi.contract.allowed_methods import AllowedMethods
from shopapi.contract.list_language import with_list_language
from shopapi.contract.operations import (
    Operations,
    base_path_of,
    failed_auth_limit_of,
    security_requirements,
)
from shopapi.contract.resolver import HandlerResolver
from shopapi.contract.shapes import event_shapes, operation_shapes
from shopapi.contract.spec_files import SPEC_DIR, SPEC_FILES
from shopapi.contract.uri_parsing import ArrayFormsURIParser
from shopapi.contract.validation import validator_map
from shopapi.events import stream_poller
from shopapi.events.push import webpush
from shopapi.events.push.endpoints import EndpointRule
from shopapi.events.stream_poller import EventStreams
from shopapi.internals import connexion as connexion_internals
from shopapi.pipeline.admission import AdmissionMiddleware
from shopapi.pipeline.body_limit import BodyLimitMiddleware
from shopapi.pipeline.cors import Cors
from shopapi.pipeline.draining import Drain
from shopapi.pipeline.event_stream import EventStreamMiddleware
from shopapi.pipeline.exact_paths import (
    EncodedSeparatorMiddleware,
    ExactRoutingMiddleware,
    ExactSwaggerUIMiddleware,
    no_merge_slashes,
)
from shopapi.pipeline.forwarded import ForwardedHeadersMiddleware, TrustedProxies
from shopapi.pipeline.idempotency import IdempotencyMiddleware, commit_answers_with_changes
from shopapi.pipeline.limit_counter import LimitCounter, scaled
from shopapi.pipeline.media_types import MediaTypeMiddleware
from shopapi.pipeline.observability import ObservabilityMiddleware
from shopapi.pipeline.rate_limits import FailedAuthMiddleware, RateLimitMiddleware
from shopapi.pipeline.read_routing import marks_of, read_routing
from shopapi.pipeline.request_facts import RoutedOperationMiddleware
from shopapi.pipeline.response_headers import ResponseHeadersMiddleware
from shopapi.pipeline.revalidation import RevalidationMiddleware
from shopapi.pipeline.versions import ApiVersionMiddleware
from shopapi.pipeline.write_marks import RedisMarks
from shopapi.pipeline.wsgi_bridge import WSGIBridge
from shopapi.settings import ConfigurationError, Settings
from shopapi.telemetry import logs, metrics
from shopapi.telemetry.alerts import AlertWebhook
from shopapi.telemetry.peer_round_trips import PeerRoundTrips
from shopapi.telemetry.request_id import is_sane_request_id, new_request_id
from shopapi.web import problems
from shopapi.web.configured import Configured
from shopapi.web.jsonifier import CompactJsonifier


def _load(name: str) -> dict:
    return spec_files.load(SPEC_DIR / name)


log = logging.getLogger("shopapi.app")


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
    api_specs = [with_list_language(_load(name)) for name in SPEC_FILES.values()]
    contract_documents = served.documents(api_specs)
    # The well-known URIs and the metrics live at the root, outside the versioned API, with no
    # docs of their own. /metrics takes an admin's token or API key, or METRICS_TOKEN; the
    # health probes (/healthz, /readyz) nothing.
    root_specs = [_load("well-known.yaml"), _load("metrics.yaml")]
    for spec in [*api_specs, *root_specs]:
        security.with_api_key_scopes(security_requirements(spec))
    # A connection for each thread that may hold one: Flask's (as many as DATABASE_POOL_SIZE),
    # the pipeline's own database work's and the event streams' readers.
    connections = settings.database_pool_size + off_loop.THREADS + stream_poller.THREADS
    bounds = Bounds.configured(settings)
    use(
        open_database(
            settings.database_url, connections, settings.database_pool_wait_seconds, bounds
        )
    )
    drain = Drain(settings.drain_seconds)
    # Which tokens are revoked: for the security checks, and for the open event streams.
    revocations = Revocations()
    streams = EventStreams(
        settings.event_stream_poll_seconds,
        max_open=settings.event_stream_max_open,
        max_per_client=settings.event_stream_max_per_client,
        revocations=revocations,
    )
    drain.on_stop(streams.close)  # open streams end as the server stops accepting

    sweeper = HoldSweeper(settings.order_hold_seconds, settings.order_hold_sweep_seconds)

    app = connexion.FlaskApp(
        __name__,
        lifespan=partial(_lifespan, drain, sweeper),
        specification_dir=SPEC_DIR,
        middlewares=pipeline(settings, api_specs, root_specs, contract_documents, streams),
        jsonifier=CompactJsonifier(),
        validator_map=validator_map,
        security_map=security.SECURITY_MAP,
        uri_parser_class=ArrayFormsURIParser,
    )
    no_merge_slashes(app)
    connexion_internals.replace_flask_bridge(
        app, WSGIBridge(app.app.wsgi_app, settings.database_pool_size)
    )
    no_docs = SwaggerUIOptions(swagger_ui=False, serve_spec=False)
    # The docs UI reads the contract from ServedContractMiddleware, not from Connexion.
    docs_only = SwaggerUIOptions(serve_spec=False, swagger_ui_config=docs_ui.CONFIG)
    served_specs = [
        *((spec, docs_only) for spec in api_specs),
        *((root, no_docs) for root in root_specs),
    ]
    connexion_internals.check_specs_with(
        partial(checked_specs.check_once, marks=SPEC_DIR / ".checked")
    )
    for served_spec, docs in served_specs:
        # The base path given to Connexion explicitly: left to read it from `servers`, Connexion
        # routes every request to an API served at the root ("/") and none to the others.
        base_path = base_path_of(served_spec)
        app.add_api(
            served_spec,
            base_path=base_path,
            resolver=HandlerResolver(
                Operations([served_spec]), operation_shapes(served_spec), base_path
            ),
            strict_validation=True,
            validate_responses=settings.validate_responses,
            swagger_ui_options=docs,
        )
    problems.register(app, AllowedMethods(Operations(api_specs)))
    app.app.teardown_request(close_connection)
    # After close_connection: a request's transaction ends before its connection goes back.
    commit_answers_with_changes(app.app)
    app.app.extensions["shopapi.drain"] = drain
    app.app.extensions["shopapi.round_trip"] = _round_trip(settings)
    tokens = AccessTokens(settings)
    Configured(
        settings,
        tokens,
        webpush_endpoint_refusal=EndpointRule.of(settings).refusal,
        vapid_public_key=(
            webpush.public_key(settings.vapid_private_key) if settings.vapid_private_key else None
        ),
    ).install(app.app)
    security.install(app, tokens, settings.metrics_token, revocations)
    start_up = StartUpWork(
        settings.admin_email
        and partial(User.ensure_admin, settings.admin_email, settings.admin_password)
    )
    _start(app, start_up)
    demo.warn_of_published_passwords(settings)
    # Connexion warns on every request to an operation that accepts two media types (our
    # merge-patch and plain JSON PATCH bodies); that is by design here.
    logging.getLogger("connexion.operations.openapi3").setLevel(logging.ERROR)
    return app


def _round_trip(settings: Settings) -> RoundTrip | None:
    """The primary's round trip, measured for /readyz and the metrics (PostgreSQL only); other
    hosts' through the shared Redis, without which no host knows it is slower than the rest."""
    if not settings.database_url.startswith("postgres"):
        return None
    store = settings.shared_store_url
    database_name = urlsplit(settings.database_url).path.lstrip("/")
    return RoundTrip(
        settings.database_url,
        settings.database_slow_round_trip_ms,
        peers=None if store.startswith("memory") else PeerRoundTrips(store, database_name),
        observe=metrics.DATABASE_ROUND_TRIP.set,
    )


@contextlib.asynccontextmanager
async def _lifespan(drain: Drain, sweeper: HoldSweeper, app):
    """While the server serves: its drain on SIGTERM, and the expiry of overdue orders."""
    async with drain.lifespan(app):
        with sweeper.running():
            yield


def _start(app: connexion.FlaskApp, start_up: StartUpWork) -> None:
    """Do the start-up's database work now if the database answers, else in a thread that
    tries again until it does (and at each readiness probe, which says 503 until then)."""
    app.app.extensions["shopapi.start_up"] = start_up
    try:
        with database.connection_context():
            start_up.run()
    except (peewee.OperationalError, peewee.InterfaceError) as error:
        log.warning(
            "the database does not answer at start-up: serving, not ready, until it does (%s)",
            error_summary(error),
        )
        threading.Thread(target=start_up.finish, name="start-up", daemon=True).start()


def pipeline(
    settings: Settings,
    api_specs: list[dict],
    root_specs: list[dict],
    contract_documents: dict,
    streams: EventStreams,
) -> list:
    """Every layer a request passes through, outermost first; the last hands it to Flask (on the
    WSGIBridge's threads), where the resolver's wrappers (ETags, the version's shapes) call the
    handler. docs/architecture.md walks one request through it."""
    operations = Operations([*api_specs, *root_specs])
    root_operations = Operations(root_specs)
    counter = LimitCounter(settings.shared_store_url)
    marks = marks_of(settings)  # of the callers' writes, for read routing (None: no replicas)
    scale = settings.rate_limit_scale
    failed_auth_limit = failed_auth_limit_of(api_specs[0])
    alerts = AlertWebhook(settings.alert_webhook_url) if settings.alert_webhook_url else None
    unversioned = tuple(op.route for op in root_operations)
    # The operations a balancer polls (`x-probe`): apart in the request log and the metrics.
    probes = root_operations.probes
    layers = [
        # Connexion's last resort: a plain 500 for what escapes every layer below.
        ServerErrorMiddleware,
        # From here on, the client's address is the one the named proxies forwarded (if any).
        settings.forwarded_allow_ips
        and partial(
            ForwardedHeadersMiddleware, proxies=TrustedProxies(settings.forwarded_allow_ips)
        ),
        # X-Request-ID on every response, errors included; every log line carries it.
        partial(
            CorrelationIdMiddleware,
            header_name="X-Request-ID",
            generator=new_request_id,
            validator=is_sane_request_id,
        ),
        # Every response measured once with its final status: metrics, log line, slow alerts.
        # Health probes apart: a 2xx one neither logged nor counted as a request. An event
        # stream is logged and counted when it ends, but is no slow request.
        partial(
            ObservabilityMiddleware,
            slow_request_ms=settings.slow_request_ms,
            alerts=alerts,
            probes=probes,
            long_lived=frozenset({EventStreamMiddleware.OPERATION_ID}),
        ),
        # What the layers below learned, on every response, the 429s and errors made below
        # included: RateLimit-*, API-Version and Vary, a deprecated operation's Deprecation.
        ResponseHeadersMiddleware,
        # CORS on every response, errors included; preflights answered here (if configured).
        settings.cors_origins
        and partial(
            Cors, origins=settings.cors_origins, allow_credentials=settings.cors_allow_credentials
        ),
        # An unversioned path gets its version (from Accept) before anything routes it; 406.
        partial(
            ApiVersionMiddleware,
            served=tuple(SPEC_FILES),
            default=settings.default_api_version,
            unversioned=unversioned,
        ),
        # Connexion's: any exception below becomes problem+json (shopapi/web/problems.py).
        ExceptionMiddleware,
        # A path with an encoded `/` or `\` is a 404 before anything serves its decoded form.
        EncodedSeparatorMiddleware,
        # Each version's contract document, prepared once, with its ETag and gzip form.
        partial(served.ServedContractMiddleware, documents=contract_documents),
        # Connexion's docs UI, then its router: neither redirects a path that is not a route.
        ExactSwaggerUIMiddleware,
        ExactRoutingMiddleware,
        # The routed operation, noted once for every layer, inner and outer.
        partial(RoutedOperationMiddleware, operations=operations),
        # 413 beyond the body limit, before anything reads the body.
        partial(BodyLimitMiddleware, max_bytes=settings.max_body_bytes),
        # A server busy with as many requests as it answers promptly refuses more at once (503)
        # before they cost anything more: credentials, rate limit, validation. A body has
        # arrived whole before its request takes a place.
        settings.admission_concurrency
        and partial(
            AdmissionMiddleware,
            concurrency=settings.admission_concurrency,
            queue=settings.admission_queue,
            max_wait_seconds=settings.admission_max_wait_ms / 1000,
            standing_wait_seconds=settings.admission_standing_wait_ms / 1000,
            long_lived=frozenset({EventStreamMiddleware.OPERATION_ID}),
        ),
        # An address whose credentials keep failing gets 429 for its further failures (valid
        # credentials from it pass): it sees the 401s of the security checks inside it.
        failed_auth_limit
        and partial(FailedAuthMiddleware, counter=counter, limit=scaled(failed_auth_limit, scale)),
        # Connexion's: the spec's security schemes. The caller is known from here on.
        SecurityMiddleware,
        # Each operation's x-rate-limit per caller, and the way to its per-account attempt
        # limit for the handlers that count attempts (the token endpoint).
        partial(
            RateLimitMiddleware,
            counter=counter,
            operations=operations,
            scale=scale,
            marks=marks if isinstance(marks, RedisMarks) else None,
        ),
        # A request that only reads goes to a replica that has its caller's writes (if replicas
        # are configured); anything else to the primary. Before validation, for the next layer.
        read_routing(settings, marks),
        # A list revalidated as before, by the same caller, answered 304 while the versions of
        # the tables its handler found it reads stand: no validation, no hand-off to Flask.
        RevalidationMiddleware,
        # A body's media type read as RFC 9110 reads it, before validation picks a schema.
        MediaTypeMiddleware,
        # Connexion's: parameters and body against the contract, then responses (in tests).
        RequestValidationMiddleware,
        settings.validate_responses and ResponseValidationMiddleware,
        # Connexion's: start-up and shut-down.
        LifespanMiddleware,
        # The event stream, answered here and not by a Flask thread: its security, rate limit
        # (one hit a connection) and parameters have been checked; it reads the database only
        # through its poller (read routing lets it pass), and sits before Idempotency-Key.
        partial(
            EventStreamMiddleware,
            streams=streams,
            heartbeat_seconds=settings.event_stream_heartbeat_seconds,
            max_seconds=settings.event_stream_max_seconds,
            event_shapes=event_shapes(dict(zip(SPEC_FILES, api_specs, strict=True))),
        ),
        # Idempotency-Key replays, for valid requests only, just outside the handler. It renders
        # the handler's errors itself, with the same handlers, so that they are replayed too.
        partial(
            IdempotencyMiddleware,
            secret=settings.hmac_secret,
            error_handlers=problems.handlers(AllowedMethods(Operations(api_specs))),
            lease=datetime.timedelta(seconds=settings.idempotency_lease_seconds),
        ),
        # Connexion's: the request's context (connexion.context) for the handler.
        ContextMiddleware,
    ]
    return [layer for layer in layers if layer]
