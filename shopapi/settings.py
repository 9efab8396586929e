"""The service's configuration, read once from the environment into one typed object.
Each field of `Settings` is one setting: its variable, parser, default and (above it) meaning."""

import dataclasses
import ipaddress
import json
import logging
import os
import pathlib
import secrets
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger("shopapi.settings")


class ConfigurationError(Exception):
    """A configuration value is unusable; the message names the variable."""


# A parser takes a variable's name and its value, and answers the setting or raises
# ConfigurationError naming the variable.
Parser = Callable[[str, str], Any]


def _boolean(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ConfigurationError(f"{name} must be a boolean (1/0, true/false), not {raw!r}")


def _integer(minimum: int, maximum: int) -> Parser:
    def parse(name: str, raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise ConfigurationError(f"{name} must be an integer, not {raw!r}") from None
        if not minimum <= value <= maximum:
            raise ConfigurationError(f"{name} must be between {minimum} and {maximum}, not {value}")
        return value

    return parse


def _positive_number(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = 0
    if not 0 < value < 1e9:
        raise ConfigurationError(f"{name} must be a positive number, not {raw!r}")
    return value


def _secret(minimum_length: int) -> Parser:
    def parse(name: str, raw: str) -> bytes:
        if len(raw) < minimum_length:
            raise ConfigurationError(f"{name} must be at least {minimum_length} characters long")
        return raw.encode()

    return parse


def _token(name: str, raw: str) -> str:
    return _secret(16)(name, raw).decode()


def _non_empty(name: str, raw: str) -> str:
    if not raw.strip():
        raise ConfigurationError(f"{name} must not be empty")
    return raw


def _text_or_none(name: str, raw: str) -> str | None:
    return raw or None


def _one_of(*choices: str) -> Parser:
    def parse(name: str, raw: str) -> str:
        if raw not in choices:
            raise ConfigurationError(f"{name} must be {' or '.join(choices)}")
        return raw

    return parse


def _url(*schemes: str) -> Parser:
    def parse(name: str, raw: str) -> str:
        if urllib.parse.urlsplit(raw).scheme not in schemes or "://" not in raw:
            raise ConfigurationError(
                f"{name} must be a URL starting with one of {', '.join(schemes)}"
            )
        return raw

    return parse


def _database_url(name: str, raw: str) -> str:
    if not raw.startswith(("sqlite:///", "postgresql://", "postgres://")):
        raise ConfigurationError(
            f"{name} must start with sqlite:/// or postgresql://, not {raw.split(':', 1)[0]!r}"
        )
    return raw


def _replica_urls(name: str, raw: str) -> tuple[str, ...]:
    urls = tuple(url.strip() for url in raw.split(",") if url.strip())
    if not all(url.startswith(("postgresql://", "postgres://")) for url in urls):
        raise ConfigurationError(f"{name} must be comma-separated postgresql:// URLs")
    return urls


def _pem_file(name: str, raw: str) -> str:
    try:
        text = pathlib.Path(raw).read_text()
    except OSError as error:
        raise ConfigurationError(f"{name}: cannot read {raw!r} ({error.strerror})") from None
    if "-----BEGIN" not in text:
        raise ConfigurationError(f"{name} must name a PEM file")
    return text


def _trusted_issuers(name: str, raw: str) -> dict[str, str]:
    try:
        issuers = json.loads(raw)
    except ValueError:
        issuers = None
    if not isinstance(issuers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and k and v for k, v in issuers.items()
    ):
        raise ConfigurationError(
            f"{name} must be a JSON object of issuer to JWKS file or URL, such as "
            '{"https://auth.example.com": "https://auth.example.com/jwks.json"}'
        )
    return issuers


def _origins(name: str, raw: str) -> tuple[str, ...]:
    origins = tuple(o.strip().rstrip("/") for o in raw.split(",") if o.strip())
    for origin in origins:
        parts = urllib.parse.urlsplit(origin)
        if origin != "*" and (
            parts.scheme not in ("http", "https") or not parts.netloc or parts.path
        ):
            raise ConfigurationError(
                f"{name} must be * or comma-separated origins such as https://shop.example.com, "
                f"not {origin!r}"
            )
    return origins


def _proxies(name: str, raw: str) -> tuple[str, ...]:
    entries = tuple(entry.strip() for entry in raw.split(",") if entry.strip())
    for entry in entries:
        try:
            ipaddress.ip_network(entry)
        except ValueError:
            raise ConfigurationError(
                f"{name} must list the proxies' addresses or networks, comma-separated (such as "
                f"10.0.0.5,10.1.0.0/16; 0.0.0.0/0,::/0 to believe anyone), not {entry!r}"
            ) from None
    return entries


def _setting(variable: str, parse: Parser, default=None, *, factory=None) -> Any:
    """A field of `Settings`, read from `variable` by `parse` when the environment sets it."""
    metadata = {"variable": variable, "parse": parse}
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
    database_url: str = _setting("DATABASE_URL", _database_url, "sqlite:///data/shopapi.db")
    # Hot standbys of DATABASE_URL taking the reads (postgresql:// URLs, comma-separated), and
    # how far behind the primary one may be before it is skipped: docs/database.md.
    database_replica_urls: tuple[str, ...] = _setting("DATABASE_REPLICA_URLS", _replica_urls, ())
    database_replica_max_lag_seconds: float = _setting(
        "DATABASE_REPLICA_MAX_LAG_SECONDS", _positive_number, 5.0
    )
    # Check every response against the contract: on in tests; it doubles a request's cost.
    validate_responses: bool = _setting("VALIDATE_RESPONSES", _boolean, False)
    # PostgreSQL connections per worker process, and Flask's threads (pipeline/wsgi_bridge.py).
    database_pool_size: int = _setting("DATABASE_POOL_SIZE", _integer(1, 1000), 10)
    # The largest request body (413 beyond); not read from the environment.
    max_body_bytes: int = 1024 * 1024
    # Signs list cursors and keys idempotency fingerprints; a generated one suits one process.
    cursor_secret: bytes = _setting("CURSOR_SECRET", _secret(16), factory=_random_secret)
    # The HS256 key signing access tokens (RFC 7518 3.2: as long as the hash), unless RS256 keys.
    jwt_secret: bytes = _setting("JWT_SECRET", _secret(32), factory=_random_secret)
    # An RS256 key pair (PEM files, read as text) to sign with instead: both or neither.
    jwt_private_key: str | None = _setting("JWT_PRIVATE_KEY", _pem_file)
    jwt_public_key: str | None = _setting("JWT_PUBLIC_KEY", _pem_file)
    # The `iss` of our tokens, and the `aud` every accepted token carries.
    jwt_issuer: str = _setting("JWT_ISSUER", _non_empty, "shopapi")
    jwt_audience: str = _setting("JWT_AUDIENCE", _non_empty, "shopapi")
    # Seconds an access token (15 minutes) and a refresh token (14 days) live.
    access_token_ttl: int = _setting("ACCESS_TOKEN_TTL", _integer(30, 24 * 3600), 900)
    refresh_token_ttl: int = _setting(
        "REFRESH_TOKEN_TTL", _integer(60, 365 * 24 * 3600), 14 * 24 * 3600
    )
    # External authorisation servers whose tokens are accepted: issuer -> JWKS file or URL.
    oauth_trusted_issuers: Mapping[str, str] = _setting(
        "OAUTH_TRUSTED_ISSUERS", _trusted_issuers, factory=dict
    )
    # The first admin, created at start-up when no user has this email; both or neither.
    admin_email: str | None = _setting("ADMIN_EMAIL", _text_or_none)
    admin_password: str | None = _setting("ADMIN_PASSWORD", _text_or_none)
    # Where the spec's rate limits are counted: in this process (memory://) or in a shared Redis.
    rate_limit_storage_uri: str = _setting(
        "RATELIMIT_STORAGE_URI", _url("memory", "redis", "rediss", "redis+unix"), "memory://"
    )
    # Multiplies every limit of the spec: load tests raise them, tests of the limits lower them.
    rate_limit_scale: float = _setting("RATE_LIMIT_SCALE", _positive_number, 1.0)
    # Browser origins allowed to call the API: none is same-origin only, "*" is any.
    cors_origins: tuple[str, ...] = _setting("CORS_ORIGINS", _origins, ())
    # Let browsers send credentials cross-origin (the Fetch standard forbids it with "*").
    cors_allow_credentials: bool = _setting("CORS_ALLOW_CREDENTIALS", _boolean, False)
    # The proxies whose X-Forwarded-For/-Proto are believed (pipeline/forwarded.py); none: the peer.
    forwarded_allow_ips: tuple[str, ...] = _setting("FORWARDED_ALLOW_IPS", _proxies, ())
    # A bearer token that reads /metrics too (otherwise it takes the `admin` scope): Prometheus.
    metrics_token: str | None = _setting("METRICS_TOKEN", _token)
    # A response slower than this is logged as a warning, counted, and alerted on.
    slow_request_ms: int = _setting("SLOW_REQUEST_MS", _integer(0, 3_600_000), 500)
    # Where slow-request alerts are posted (Alertmanager's /api/v2/alerts, or alike).
    alert_webhook_url: str | None = _setting("ALERT_WEBHOOK_URL", _url("http", "https"))
    # The version an unversioned path with a plain JSON Accept gets (the app checks it serves it).
    default_api_version: int = _setting("API_DEFAULT_VERSION", _integer(1, 9999), 1)
    # A product whose stock falls below this emits `product.low_stock`.
    low_stock_threshold: int = _setting("LOW_STOCK_THRESHOLD", _integer(0, 2**31 - 1), 5)
    # Accept webhook targets on private, loopback or link-local addresses (tests, development).
    webhook_allow_private: bool = _setting("WEBHOOK_ALLOW_PRIVATE", _boolean, False)
    # How long each delivery attempt waits for an answer.
    webhook_timeout_seconds: float = _setting("WEBHOOK_TIMEOUT_SECONDS", _positive_number, 10.0)
    # A failed attempt is retried after about base x 2^(attempt - 1) s (jittered, at most 1 h).
    webhook_retry_base_seconds: float = _setting(
        "WEBHOOK_RETRY_BASE_SECONDS", _positive_number, 30.0
    )
    # Attempts before a delivery is failed.
    webhook_max_attempts: int = _setting("WEBHOOK_MAX_ATTEMPTS", _integer(1, 100), 8)
    # How often the worker (events/worker.py) looks for new events and due deliveries.
    webhook_poll_seconds: float = _setting("WEBHOOK_POLL_SECONDS", _positive_number, 1.0)
    # Deliveries a worker process makes at once (one such process on SQLite: one writer).
    webhook_worker_threads: int = _setting("WEBHOOK_WORKER_THREADS", _integer(1, 64), 4)
    # Seconds a server keeps serving after SIGTERM, /readyz answering 503, before it stops
    # accepting: longer than its balancer takes to see the 503 (pipeline/draining.py).
    drain_seconds: int = _setting("DRAIN_SECONDS", _integer(0, 600), 5)
    # An Idempotency-Key claimed by a request that never answered (its server died) is taken
    # over by a retry after this long; a request running longer could run twice.
    idempotency_lease_seconds: int = _setting("IDEMPOTENCY_LEASE_SECONDS", _integer(1, 86400), 300)
    # Where mobile push notifications go: `log` (a JSON line each) or `none`.
    push_transport: str = _setting("PUSH_TRANSPORT", _one_of("log", "none"), "log")

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
            if variable is not None and variable in environ:
                values[field.name] = field.metadata["parse"](variable, environ[variable])
        _check_together(values)
        return cls(**values)


def generated_secrets(environ: Mapping[str, str]) -> list[str]:
    """The secrets `environ` leaves to be generated (each good for one process only)."""
    generated = [] if "CURSOR_SECRET" in environ else ["CURSOR_SECRET"]
    if not {"JWT_SECRET", "JWT_PRIVATE_KEY", "JWT_PUBLIC_KEY"} & environ.keys():
        generated.append("JWT_SECRET")
    return generated


def _variables_read(environ: Mapping[str, str]) -> Mapping[str, str]:
    """`environ` without what it does not use: an RS256 key, when given, replaces JWT_SECRET."""
    if {"JWT_PRIVATE_KEY", "JWT_PUBLIC_KEY"} & environ.keys():
        return {name: value for name, value in environ.items() if name != "JWT_SECRET"}
    return environ


def _check_together(values: dict) -> None:
    """Refuse settings that are each valid but not together."""
    if "jwt_private_key" in values or "jwt_public_key" in values:
        for name in ("jwt_private_key", "jwt_public_key"):
            if name not in values:
                raise ConfigurationError(f"{name.upper()} must be set too: RS256 needs both keys")
    if values.get("database_replica_urls") and not values.get("database_url", "").startswith(
        ("postgresql://", "postgres://")
    ):
        raise ConfigurationError("DATABASE_REPLICA_URLS needs a PostgreSQL DATABASE_URL")
    email, password = values.get("admin_email"), values.get("admin_password")
    if (email or password) and (not email or len(password or "") < 8):
        raise ConfigurationError(
            "ADMIN_EMAIL and ADMIN_PASSWORD go together, the password at least 8 characters"
        )
    if values.get("cors_allow_credentials") and "*" in values.get("cors_origins", ()):
        raise ConfigurationError(
            "CORS_ORIGINS cannot be * when CORS_ALLOW_CREDENTIALS is on: list the origins"
        )
