"""The service's configuration, read once from the environment into one typed object.
Each field of `Settings` is one setting: its variable, parser (shopapi/settings/parse.py), default
and (above it) meaning."""

import dataclasses
import logging
import os
import secrets
from collections.abc import Mapping
from typing import Any

from shopapi.settings import parse
from shopapi.settings.parse import ConfigurationError, Parser

log = logging.getLogger("shopapi.settings")

__all__ = ["ConfigurationError", "Settings", "generated_secrets"]


def _setting(
    variable: str, parse: Parser, default=None, *, factory=None, formerly: tuple[str, ...] = ()
) -> Any:
    """A field of `Settings`, read from `variable` by `parse` when the environment sets it, or
    from a name it had before (`formerly`: still read, with a warning naming `variable`)."""
    metadata = {"variable": variable, "parse": parse, "formerly": formerly}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def _random_secret() -> bytes:
    return secrets.token_bytes(32)


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything the app needs to know about its environment, with defaults that work on a bare
    machine (a SQLite file under ./data/). `from_env` reads each field's variable."""

    # The database: sqlite:///relative/path.db, sqlite:////absolute/path.db or postgresql://...
    database_url: str = _setting("DATABASE_URL", parse.database_url, "sqlite:///data/shopapi.db")
    # Hot standbys of DATABASE_URL taking the reads (postgresql:// URLs, comma-separated), and
    # how far behind the primary one may be before it is skipped: docs/database.md.
    database_replica_urls: tuple[str, ...] = _setting(
        "DATABASE_REPLICA_URLS", parse.replica_urls, ()
    )
    database_replica_max_lag_seconds: float = _setting(
        "DATABASE_REPLICA_MAX_LAG_SECONDS", parse.positive_number, 5.0
    )
    # A host whose database round trip is over this, and 3 times another host's, leaves the
    # balancer's rotation (/readyz 503) until it is back under half (docs/telemetry.md); 0: never.
    database_slow_round_trip_ms: int = _setting(
        "DATABASE_SLOW_ROUND_TRIP_MS", parse.integer(0, 60_000), 50
    )
    # Check every response against the contract: on in tests; it doubles a request's cost.
    validate_responses: bool = _setting("VALIDATE_RESPONSES", parse.boolean, False)
    # PostgreSQL connections per worker process, and Flask's threads (pipeline/wsgi_bridge.py).
    database_pool_size: int = _setting("DATABASE_POOL_SIZE", parse.integer(1, 1000), 10)
    # Requests a server process executes at once, as many more waiting in line (first come,
    # first served), and beyond them a 503 with Retry-After at once (pipeline/admission.py).
    # A waiter waits at most ADMISSION_MAX_WAIT_MS while the line absorbs a burst, and at most
    # ADMISSION_STANDING_WAIT_MS within that long of the line last refusing someone (overload).
    # ADMISSION_CONCURRENCY=0: no limit, no line.
    admission_concurrency: int = _setting("ADMISSION_CONCURRENCY", parse.integer(0, 1000), 2)
    admission_queue: int = _setting("ADMISSION_QUEUE", parse.integer(0, 100_000), 8)
    admission_max_wait_ms: int = _setting("ADMISSION_MAX_WAIT_MS", parse.integer(1, 600_000), 1000)
    admission_standing_wait_ms: int = _setting(
        "ADMISSION_STANDING_WAIT_MS", parse.integer(1, 600_000), 20
    )
    # Seconds a thread waits for a pooled connection before its request is a 503.
    database_pool_wait_seconds: float = _setting(
        "DATABASE_POOL_WAIT_SECONDS", parse.positive_number, 10.0
    )
    # How long the database may take for the app's sessions (PostgreSQL; 0: the app sets none),
    # each below PgBouncer's and HAProxy's (docs/database.md, "Timeouts"): a statement; a wait for
    # a lock another transaction holds (a request that times out is a 503, its work rolled back);
    # a transaction idle between its statements (its host cut off: the server ends it, and
    # its locks go); and how long a connection's peer may leave what was sent unacknowledged,
    # or keepalives unanswered, before the connection is dropped (TCP_USER_TIMEOUT).
    database_statement_timeout_seconds: float = _setting(
        "DATABASE_STATEMENT_TIMEOUT_SECONDS", parse.non_negative_number, 5.0
    )
    database_lock_timeout_seconds: float = _setting(
        "DATABASE_LOCK_TIMEOUT_SECONDS", parse.non_negative_number, 2.0
    )
    database_idle_in_transaction_timeout_seconds: float = _setting(
        "DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS", parse.non_negative_number, 5.0
    )
    database_tcp_timeout_seconds: float = _setting(
        "DATABASE_TCP_TIMEOUT_SECONDS", parse.non_negative_number, 10.0
    )
    # The largest request body (413 beyond); not read from the environment.
    max_body_bytes: int = 1024 * 1024
    # Seconds a request's body has to arrive whole once its headers have: 408 after, the
    # connection closed (pipeline/http_server.py). A slow client sends a small body in far less.
    request_body_timeout_seconds: float = _setting(
        "REQUEST_BODY_TIMEOUT_SECONDS", parse.positive_number, 30.0
    )
    # The bytes of request bodies a server process holds while they arrive (each counted as its
    # bytes come): a body beyond is refused with 503. At least one body of the largest size.
    request_bodies_in_flight_max_bytes: int = _setting(
        "REQUEST_BODIES_IN_FLIGHT_MAX_BYTES", parse.integer(1024 * 1024, 2**40), 64 * 1024 * 1024
    )
    # Of those, what one client may hold (an address, an IPv6 address's /64, a credential): a
    # body beyond is refused with 429, and no client keeps the others' bodies out.
    request_bodies_per_client_max_bytes: int = _setting(
        "REQUEST_BODIES_PER_CLIENT_MAX_BYTES", parse.integer(1024 * 1024, 2**40), 8 * 1024 * 1024
    )
    # A body's bytes a second, on average since its head, once it has had the grace seconds:
    # 408 below, the connection closed. Kestrel's defaults (MinRequestBodyDataRate).
    request_body_min_bytes_per_second: int = _setting(
        "REQUEST_BODY_MIN_BYTES_PER_SECOND", parse.integer(0, 2**30), 240
    )
    request_body_grace_seconds: float = _setting(
        "REQUEST_BODY_GRACE_SECONDS", parse.positive_number, 5.0
    )
    # Keys the HMACs of what the server checks when it comes back: it signs list cursors, and
    # keys (derived) Idempotency-Key fingerprints. One secret to distribute: docs/decisions.md.
    # A generated one suits one process.
    hmac_secret: bytes = _setting(
        "HMAC_SECRET", parse.secret(16), factory=_random_secret, formerly=("CURSOR_SECRET",)
    )
    # The HS256 key signing access tokens (RFC 7518 3.2: as long as the hash), unless RS256 keys.
    jwt_secret: bytes = _setting("JWT_SECRET", parse.secret(32), factory=_random_secret)
    # An RS256 key pair (PEM files, read as text) to sign with instead: both or neither.
    jwt_private_key: str | None = _setting(
        "JWT_PRIVATE_KEY_FILE", parse.pem_file, formerly=("JWT_PRIVATE_KEY",)
    )
    jwt_public_key: str | None = _setting(
        "JWT_PUBLIC_KEY_FILE", parse.pem_file, formerly=("JWT_PUBLIC_KEY",)
    )
    # The `iss` of our tokens, and the `aud` every accepted token carries.
    jwt_issuer: str = _setting("JWT_ISSUER", parse.non_empty, "shopapi")
    jwt_audience: str = _setting("JWT_AUDIENCE", parse.non_empty, "shopapi")
    # Seconds an access token (15 minutes) and a refresh token (14 days) live.
    access_token_ttl: int = _setting("ACCESS_TOKEN_TTL", parse.integer(30, 24 * 3600), 900)
    refresh_token_ttl: int = _setting(
        "REFRESH_TOKEN_TTL", parse.integer(60, 365 * 24 * 3600), 14 * 24 * 3600
    )
    # External authorisation servers whose tokens are accepted: issuer -> JWKS file or URL.
    oauth_trusted_issuers: Mapping[str, str] = _setting(
        "OAUTH_TRUSTED_ISSUERS", parse.trusted_issuers, factory=dict
    )
    # The first admin, created at start-up when no user has this email; both or neither.
    admin_email: str | None = _setting("ADMIN_EMAIL", parse.text_or_none)
    admin_password: str | None = _setting("ADMIN_PASSWORD", parse.text_or_none)
    # What the server processes share: the rate limits' counts and the read-your-writes marks
    # (pipeline/write_marks.py), in this process (memory://) or in a Redis every process uses.
    shared_store_url: str = _setting(
        "SHARED_STORE_URL",
        parse.url("memory", "redis", "rediss", "redis+unix"),
        "memory://",
        formerly=("RATELIMIT_STORAGE_URI",),
    )
    # Multiplies every limit of the spec: load tests raise them, tests of the limits lower them.
    rate_limit_scale: float = _setting("RATE_LIMIT_SCALE", parse.positive_number, 1.0)
    # Browser origins allowed to call the API: none is same-origin only, "*" is any.
    cors_origins: tuple[str, ...] = _setting("CORS_ORIGINS", parse.origins, ())
    # Let browsers send credentials cross-origin (the Fetch standard forbids it with "*").
    cors_allow_credentials: bool = _setting("CORS_ALLOW_CREDENTIALS", parse.boolean, False)
    # The proxies whose X-Forwarded-For/-Proto are believed (pipeline/forwarded.py); none: the peer.
    forwarded_allow_ips: tuple[str, ...] = _setting("FORWARDED_ALLOW_IPS", parse.proxies, ())
    # A bearer token that reads /metrics too (otherwise it takes the `admin` scope): Prometheus.
    metrics_token: str | None = _setting("METRICS_TOKEN", parse.token)
    # A response slower than this is logged as a warning, counted, and alerted on.
    slow_request_ms: int = _setting("SLOW_REQUEST_MS", parse.integer(0, 3_600_000), 500)
    # Where slow-request alerts are posted (Alertmanager's /api/v2/alerts, or alike).
    alert_webhook_url: str | None = _setting("ALERT_WEBHOOK_URL", parse.url("http", "https"))
    # The version an unversioned path with a plain JSON Accept gets (the app checks it serves it).
    default_api_version: int = _setting("API_DEFAULT_VERSION", parse.integer(1, 9999), 1)
    # A product whose stock falls below this emits `product.low_stock`.
    low_stock_threshold: int = _setting("LOW_STOCK_THRESHOLD", parse.integer(0, 2**31 - 1), 5)
    # A pending order holds its stock this long, then expires (cancelled, the stock back), so
    # that an unpaid order cannot keep a product from others for ever.
    order_hold_seconds: int = _setting("ORDER_HOLD_SECONDS", parse.integer(1, 365 * 86400), 1800)
    # How often each server process looks for pending orders past their hold.
    order_hold_sweep_seconds: float = _setting(
        "ORDER_HOLD_SWEEP_SECONDS", parse.positive_number, 10.0
    )
    # The most of one product a customer's pending orders may hold together (admins and
    # partners are not limited): beyond it, placing an order is 409.
    pending_quantity_per_product_max: int = _setting(
        "PENDING_QUANTITY_PER_PRODUCT_MAX", parse.integer(1, 2**31 - 1), 100
    )
    # Accept webhook targets on private, loopback or link-local addresses (tests, development).
    webhook_allow_private: bool = _setting("WEBHOOK_ALLOW_PRIVATE", parse.boolean, False)
    # The worker's deliveries (events/worker.py), webhook and push alike: how long each attempt
    # waits for an answer;
    delivery_timeout_seconds: float = _setting(
        "DELIVERY_TIMEOUT_SECONDS",
        parse.positive_number,
        10.0,
        formerly=("WEBHOOK_TIMEOUT_SECONDS",),
    )
    # a failed attempt retried after about base x 2^(attempt - 1) s (jittered, at most 1 h);
    delivery_retry_base_seconds: float = _setting(
        "DELIVERY_RETRY_BASE_SECONDS",
        parse.positive_number,
        30.0,
        formerly=("WEBHOOK_RETRY_BASE_SECONDS",),
    )
    # the attempts before a delivery is failed;
    delivery_max_attempts: int = _setting(
        "DELIVERY_MAX_ATTEMPTS", parse.integer(1, 100), 8, formerly=("WEBHOOK_MAX_ATTEMPTS",)
    )
    # how often the worker looks for new events and due deliveries;
    delivery_poll_seconds: float = _setting(
        "DELIVERY_POLL_SECONDS", parse.positive_number, 1.0, formerly=("WEBHOOK_POLL_SECONDS",)
    )
    # the deliveries a worker process makes at once (one such process on SQLite: one writer).
    delivery_threads: int = _setting(
        "DELIVERY_THREADS", parse.integer(1, 64), 4, formerly=("WEBHOOK_WORKER_THREADS",)
    )
    # Seconds a server keeps serving after SIGTERM, /readyz answering 503, before it stops
    # accepting: longer than its balancer takes to see the 503 (pipeline/draining.py).
    drain_seconds: int = _setting("DRAIN_SECONDS", parse.integer(0, 600), 5)
    # How long a response's write waits for the client to read, the connection's buffers full,
    # before the connection is reset (pipeline/http_server.py): a client that stops reading holds
    # no response for ever, an event stream included.
    send_timeout_seconds: float = _setting("SEND_TIMEOUT_SECONDS", parse.positive_number, 30.0)
    # An Idempotency-Key claimed by a request that never answered (its server died) is taken
    # over by a retry after this long; a request still running then is rolled back, not run twice.
    idempotency_lease_seconds: int = _setting(
        "IDEMPOTENCY_LEASE_SECONDS", parse.integer(1, 86400), 300
    )
    # Push notifications (docs/events.md): `send` each to its device's push service, `log` it
    # (a JSON line, counted delivered: development), or `none` (no push deliveries are made).
    push_transport: str = _setting("PUSH_TRANSPORT", parse.one_of("send", "log", "none"), "log")
    # Web Push: the VAPID key (a PEM file of a P-256 private key; clients subscribe with its
    # public half, GET /v1/push/vapid-public-key), and the contact the push services see.
    vapid_private_key: str | None = _setting(
        "VAPID_PRIVATE_KEY_FILE", parse.p256_private_key_file, formerly=("VAPID_PRIVATE_KEY",)
    )
    vapid_subject: str | None = _setting("VAPID_SUBJECT", parse.vapid_subject)
    # Accept Web Push endpoints on private addresses, over plain http and on any port too
    # (tests, development).
    webpush_allow_private: bool = _setting("WEBPUSH_ALLOW_PRIVATE", parse.boolean, False)
    # The ports a Web Push endpoint may name (comma-separated): the push services use 443.
    webpush_ports: tuple[int, ...] = _setting("WEBPUSH_PORTS", parse.ports, (443,))
    # When set, the only hosts Web Push endpoints may be at: names, each with its subdomains
    # (the browsers' services: fcm.googleapis.com,push.services.mozilla.com,push.apple.com,
    # notify.windows.com).
    webpush_hosts: tuple[str, ...] = _setting("WEBPUSH_HOSTS", parse.host_names, ())
    # The devices a user's notifications go to, at most: registering one more retires the one
    # registered longest ago.
    push_devices_per_user: int = _setting("PUSH_DEVICES_PER_USER", parse.integer(1, 1000), 20)
    # FCM HTTP v1: the Firebase project's service-account key file, and where FCM answers.
    fcm_service_account: Mapping[str, str] | None = _setting(
        "FCM_SERVICE_ACCOUNT_FILE", parse.service_account
    )
    fcm_base_url: str = _setting(
        "FCM_BASE_URL", parse.url("https", "http"), "https://fcm.googleapis.com"
    )
    # APNs token authentication: the .p8 key, its key id, the team id, the app's bundle id
    # (apns-topic), the server (api.sandbox.push.apple.com for development builds), and the
    # certificate authorities it is checked against (the system's when unset).
    apns_key: str | None = _setting("APNS_KEY_FILE", parse.p256_private_key_file)
    apns_key_id: str | None = _setting("APNS_KEY_ID", parse.text_or_none)
    apns_team_id: str | None = _setting("APNS_TEAM_ID", parse.text_or_none)
    apns_topic: str | None = _setting("APNS_TOPIC", parse.text_or_none)
    apns_base_url: str = _setting("APNS_BASE_URL", parse.url("https"), "https://api.push.apple.com")
    apns_ca_file: str | None = _setting("APNS_CA_FILE", parse.readable_file)
    # The live event stream (GET /events/stream, pipeline/event_stream.py), per worker process:
    # a comment this often on an idle stream, so that proxies keep it open; how often new events
    # are read while any stream is open; open streams per client and in all; and how long one
    # stream lasts from its opening before the client reconnects (with Last-Event-ID; its
    # credentials checked again, so an expired one's stream ends within this; a revoked one's
    # ends as soon as the process reads the revocation).
    event_stream_heartbeat_seconds: float = _setting(
        "EVENT_STREAM_HEARTBEAT_SECONDS", parse.positive_number, 15.0
    )
    event_stream_poll_seconds: float = _setting(
        "EVENT_STREAM_POLL_SECONDS", parse.positive_number, 0.25
    )
    event_stream_max_per_client: int = _setting(
        "EVENT_STREAM_MAX_PER_CLIENT", parse.integer(1, 10_000), 5
    )
    event_stream_max_open: int = _setting("EVENT_STREAM_MAX_OPEN", parse.integer(1, 100_000), 1000)
    event_stream_max_seconds: int = _setting(
        "EVENT_STREAM_MAX_SECONDS", parse.integer(1, 24 * 3600), 900
    )

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] = os.environ, *, warn_of_generated_secrets: bool = True
    ) -> "Settings":
        """Build the settings from environment variables; a bad value raises ConfigurationError.
        A command that signs no tokens or cursors (the migrations, the seed) passes
        `warn_of_generated_secrets=False`: a generated secret is nothing to warn its user of."""
        if warn_of_generated_secrets:
            for name in generated_secrets(environ):
                log.warning("%s is not set: using a generated one (fine for one process)", name)
        environ = _variables_read(environ)
        values = {}
        for field in dataclasses.fields(cls):
            variable = field.metadata.get("variable")
            if variable is None:
                continue
            read_from = _name_set(environ, variable, field.metadata["formerly"])
            if read_from is not None:
                values[field.name] = field.metadata["parse"](read_from, environ[read_from])
        _check_together(values)
        return cls(**values)


# The former names warned of in this process: a server reads its settings more than once (its
# HTTP server, the app, gunicorn's master before its workers fork), its operator needs one line.
_deprecated_names_warned: set[str] = set()


def _name_set(environ: Mapping[str, str], variable: str, formerly: tuple[str, ...]) -> str | None:
    """The name `environ` sets the setting `variable` by, if any: its own, or a former one
    (warned of). Both, set differently, are refused: which one the operator meant is unknown."""
    for old in (name for name in formerly if name in environ):
        if variable in environ and environ[variable] != environ[old]:
            raise ConfigurationError(
                f"{old} and {variable} are both set, differently: {old} is deprecated, "
                f"set {variable} only"
            )
        if old not in _deprecated_names_warned:
            _deprecated_names_warned.add(old)
            log.warning("%s is deprecated: set %s instead", old, variable)
        if variable not in environ:
            return old
    return variable if variable in environ else None


def generated_secrets(environ: Mapping[str, str]) -> list[str]:
    """The secrets `environ` leaves to be generated (each good for one process only)."""
    generated = [] if {"HMAC_SECRET", "CURSOR_SECRET"} & environ.keys() else ["HMAC_SECRET"]
    if not {"JWT_SECRET", *_RS256_KEYS} & environ.keys():
        generated.append("JWT_SECRET")
    return generated


# The RS256 key pair's variables, former names included.
_RS256_KEYS = {"JWT_PRIVATE_KEY_FILE", "JWT_PUBLIC_KEY_FILE", "JWT_PRIVATE_KEY", "JWT_PUBLIC_KEY"}


def _variables_read(environ: Mapping[str, str]) -> Mapping[str, str]:
    """`environ` without what it does not use: an RS256 key, when given, replaces JWT_SECRET."""
    if _RS256_KEYS & environ.keys():
        return {name: value for name, value in environ.items() if name != "JWT_SECRET"}
    return environ


def _check_together(values: dict) -> None:
    """Refuse settings that are each valid but not together."""
    if "jwt_private_key" in values or "jwt_public_key" in values:
        for name in ("jwt_private_key", "jwt_public_key"):
            if name not in values:
                raise ConfigurationError(
                    f"{_variable(name)} must be set too: RS256 needs both keys"
                )
    if values.get("database_replica_urls") and not values.get("database_url", "").startswith(
        ("postgresql://", "postgres://")
    ):
        raise ConfigurationError("DATABASE_REPLICA_URLS needs a PostgreSQL DATABASE_URL")
    statement = values.get("database_statement_timeout_seconds", 5.0)
    lock = values.get("database_lock_timeout_seconds", 2.0)
    if statement and lock >= statement:
        # The statement timeout would end every lock wait first (PostgreSQL's documentation).
        raise ConfigurationError(
            "DATABASE_LOCK_TIMEOUT_SECONDS must be below DATABASE_STATEMENT_TIMEOUT_SECONDS"
        )
    email, password = values.get("admin_email"), values.get("admin_password")
    if (email or password) and (not email or len(password or "") < 8):
        raise ConfigurationError(
            "ADMIN_EMAIL and ADMIN_PASSWORD go together, the password at least 8 characters"
        )
    for group in (
        ("vapid_private_key", "vapid_subject"),
        ("apns_key", "apns_key_id", "apns_team_id", "apns_topic"),
    ):
        if any(values.get(name) for name in group) and not all(values.get(n) for n in group):
            names = ", ".join(_variable(name) for name in group)
            raise ConfigurationError(f"{names} go together")
    if values.get("cors_allow_credentials") and "*" in values.get("cors_origins", ()):
        raise ConfigurationError(
            "CORS_ORIGINS cannot be * when CORS_ALLOW_CREDENTIALS is on: list the origins"
        )


def _variable(field_name: str) -> str:
    """The variable the setting `field_name` of Settings is read from."""
    return Settings.__dataclass_fields__[field_name].metadata["variable"]
