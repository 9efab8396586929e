"""The service's configuration: read once from the environment into one typed object."""

import dataclasses
import ipaddress
import json
import logging
import os
import pathlib
import secrets
import urllib.parse
from collections.abc import Mapping

log = logging.getLogger("shopapi.settings")


class ConfigurationError(Exception):
    """A configuration value is unusable; the message names the variable."""


def _boolean(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ConfigurationError(f"{name} must be a boolean (1/0, true/false), not {raw!r}")


def _integer(name: str, raw: str, minimum: int, maximum: int) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be an integer, not {raw!r}") from None
    if not minimum <= value <= maximum:
        raise ConfigurationError(f"{name} must be between {minimum} and {maximum}, not {value}")
    return value


def _secret(name: str, raw: str) -> bytes:
    if len(raw) < 16:
        raise ConfigurationError(f"{name} must be at least 16 characters long")
    return raw.encode()


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


def _url(name: str, raw: str, schemes: tuple[str, ...]) -> str:
    if urllib.parse.urlsplit(raw).scheme not in schemes or "://" not in raw:
        raise ConfigurationError(f"{name} must be a URL starting with one of {', '.join(schemes)}")
    return raw


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


def _positive_number(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = 0
    if not 0 < value < 1e9:
        raise ConfigurationError(f"{name} must be a positive number, not {raw!r}")
    return value


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


def _database_url(name: str, raw: str) -> str:
    if not raw.startswith(("sqlite:///", "postgresql://", "postgres://")):
        raise ConfigurationError(
            f"{name} must start with sqlite:/// or postgresql://, not {raw.split(':', 1)[0]!r}"
        )
    return raw


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything the app needs to know about its environment, with defaults that work on a bare
    machine (a SQLite file under ./data/)."""

    database_url: str = "sqlite:///data/shopapi.db"
    # Checking every response against the contract doubles the cost of a request: on in tests,
    # off in production unless asked for.
    validate_responses: bool = False
    # PostgreSQL connections per worker process, and the threads Flask runs on
    # (shopapi/pipeline/wsgi_bridge.py): a handler thread always finds a connection.
    database_pool_size: int = 10
    max_body_bytes: int = 1024 * 1024
    # Signs list cursors. Generated when unset, which suits one process: workers that share
    # clients must share the secret.
    cursor_secret: bytes = dataclasses.field(default_factory=lambda: secrets.token_bytes(32))
    # Access tokens are HS256 with `jwt_secret`, or RS256 when a key pair is given (PEM text).
    # Like the cursor secret, a generated one suits one process only.
    jwt_secret: bytes = dataclasses.field(default_factory=lambda: secrets.token_bytes(32))
    jwt_private_key: str | None = None
    jwt_public_key: str | None = None
    jwt_issuer: str = "shopapi"
    jwt_audience: str = "shopapi"
    access_token_ttl: int = 900
    refresh_token_ttl: int = 14 * 24 * 3600
    # External authorisation servers whose tokens are accepted: issuer -> JWKS file or URL.
    oauth_trusted_issuers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # The first admin, created at start-up when no user has this email.
    admin_email: str | None = None
    admin_password: str | None = None
    # Rate limits are declared in the spec; they are counted in this process (memory://) or in
    # Redis (redis://host:6379/0), which every worker and host then shares.
    rate_limit_storage_uri: str = "memory://"
    # Multiplies every limit of the spec: load tests raise them, tests of the limits lower them.
    rate_limit_scale: float = 1.0
    # Browser origins allowed to call the API; empty is same-origin only, "*" is any (not
    # together with credentials, which the Fetch standard forbids).
    cors_origins: tuple[str, ...] = ()
    cors_allow_credentials: bool = False
    # The proxies (addresses or networks) whose X-Forwarded-For and X-Forwarded-Proto are
    # believed (shopapi/pipeline/forwarded.py); none by default: the peer is the client.
    forwarded_allow_ips: tuple[str, ...] = ()
    # /metrics takes an admin's credentials (the `admin` scope); this token, when set, lets
    # Prometheus scrape it too (as does the production server's separate METRICS_BIND listener).
    metrics_token: str | None = None
    # A response slower than this is logged as a warning, counted, and alerted on.
    slow_request_ms: int = 500
    alert_webhook_url: str | None = None
    # The version that an unversioned path (/products) with a plain JSON Accept gets.
    default_api_version: int = 1
    # Events: a product whose stock falls below this emits `product.low_stock`.
    low_stock_threshold: int = 5
    # Webhook targets on private, loopback or link-local addresses are refused unless allowed
    # (a receiver on the same host or network: tests, development).
    webhook_allow_private: bool = False
    # Delivery: each attempt waits this long for an answer; a failed one is retried after
    # about base x 2^(attempt - 1) seconds (with jitter, at most an hour), until max_attempts.
    webhook_timeout_seconds: float = 10.0
    webhook_retry_base_seconds: float = 30.0
    webhook_max_attempts: int = 8
    # The worker (shopapi/events/worker.py) looks for new events and due deliveries this often, and
    # delivers with this many threads (one worker process on SQLite, which has one writer).
    webhook_poll_seconds: float = 1.0
    webhook_worker_threads: int = 4
    # Where mobile push notifications go: `log` (a JSON line each, the default) or `none`.
    push_transport: str = "log"

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
        values = {}
        if "DATABASE_URL" in environ:
            values["database_url"] = _database_url("DATABASE_URL", environ["DATABASE_URL"])
        if "VALIDATE_RESPONSES" in environ:
            values["validate_responses"] = _boolean(
                "VALIDATE_RESPONSES", environ["VALIDATE_RESPONSES"]
            )
        if "DATABASE_POOL_SIZE" in environ:
            values["database_pool_size"] = _integer(
                "DATABASE_POOL_SIZE", environ["DATABASE_POOL_SIZE"], 1, 1000
            )
        if "CURSOR_SECRET" in environ:
            values["cursor_secret"] = _secret("CURSOR_SECRET", environ["CURSOR_SECRET"])
        values.update(_security_from_env(environ))
        values.update(_traffic_from_env(environ))
        values.update(_events_from_env(environ))
        return cls(**values)


def generated_secrets(environ: Mapping[str, str]) -> list[str]:
    """The secrets `environ` leaves to be generated (each good for one process only)."""
    generated = [] if "CURSOR_SECRET" in environ else ["CURSOR_SECRET"]
    if not {"JWT_SECRET", "JWT_PRIVATE_KEY", "JWT_PUBLIC_KEY"} & environ.keys():
        generated.append("JWT_SECRET")
    return generated


def _security_from_env(environ: Mapping[str, str]) -> dict:
    values = {}
    if "JWT_PRIVATE_KEY" in environ or "JWT_PUBLIC_KEY" in environ:
        for name in ("JWT_PRIVATE_KEY", "JWT_PUBLIC_KEY"):
            if name not in environ:
                raise ConfigurationError(f"{name} must be set too: RS256 needs both keys")
            values[name.lower()] = _pem_file(name, environ[name])
    elif "JWT_SECRET" in environ:
        if len(environ["JWT_SECRET"]) < 32:
            # RFC 7518 3.2: an HS256 key is at least as long as the hash (256 bits).
            raise ConfigurationError("JWT_SECRET must be at least 32 characters long")
        values["jwt_secret"] = environ["JWT_SECRET"].encode()
    for name in ("JWT_ISSUER", "JWT_AUDIENCE"):
        if name in environ:
            if not environ[name].strip():
                raise ConfigurationError(f"{name} must not be empty")
            values[name.lower()] = environ[name]
    if "ACCESS_TOKEN_TTL" in environ:
        values["access_token_ttl"] = _integer(
            "ACCESS_TOKEN_TTL", environ["ACCESS_TOKEN_TTL"], 30, 24 * 3600
        )
    if "REFRESH_TOKEN_TTL" in environ:
        values["refresh_token_ttl"] = _integer(
            "REFRESH_TOKEN_TTL", environ["REFRESH_TOKEN_TTL"], 60, 365 * 24 * 3600
        )
    if "OAUTH_TRUSTED_ISSUERS" in environ:
        values["oauth_trusted_issuers"] = _trusted_issuers(
            "OAUTH_TRUSTED_ISSUERS", environ["OAUTH_TRUSTED_ISSUERS"]
        )
    if environ.get("ADMIN_EMAIL") or environ.get("ADMIN_PASSWORD"):
        if not environ.get("ADMIN_EMAIL") or len(environ.get("ADMIN_PASSWORD", "")) < 8:
            raise ConfigurationError(
                "ADMIN_EMAIL and ADMIN_PASSWORD go together, the password at least 8 characters"
            )
        values["admin_email"] = environ["ADMIN_EMAIL"]
        values["admin_password"] = environ["ADMIN_PASSWORD"]
    return values


def _traffic_from_env(environ: Mapping[str, str]) -> dict:
    values = {}
    if "RATELIMIT_STORAGE_URI" in environ:
        values["rate_limit_storage_uri"] = _url(
            "RATELIMIT_STORAGE_URI",
            environ["RATELIMIT_STORAGE_URI"],
            ("memory", "redis", "rediss", "redis+unix"),
        )
    if "RATE_LIMIT_SCALE" in environ:
        values["rate_limit_scale"] = _positive_number(
            "RATE_LIMIT_SCALE", environ["RATE_LIMIT_SCALE"]
        )
    if "CORS_ORIGINS" in environ:
        values["cors_origins"] = _origins("CORS_ORIGINS", environ["CORS_ORIGINS"])
    if "CORS_ALLOW_CREDENTIALS" in environ:
        values["cors_allow_credentials"] = _boolean(
            "CORS_ALLOW_CREDENTIALS", environ["CORS_ALLOW_CREDENTIALS"]
        )
    if values.get("cors_allow_credentials") and "*" in values.get("cors_origins", ()):
        raise ConfigurationError(
            "CORS_ORIGINS cannot be * when CORS_ALLOW_CREDENTIALS is on: list the origins"
        )
    if "FORWARDED_ALLOW_IPS" in environ:
        values["forwarded_allow_ips"] = _proxies(
            "FORWARDED_ALLOW_IPS", environ["FORWARDED_ALLOW_IPS"]
        )
    if "METRICS_TOKEN" in environ:
        values["metrics_token"] = _secret("METRICS_TOKEN", environ["METRICS_TOKEN"]).decode()
    if "SLOW_REQUEST_MS" in environ:
        values["slow_request_ms"] = _integer(
            "SLOW_REQUEST_MS", environ["SLOW_REQUEST_MS"], 0, 3_600_000
        )
    if "API_DEFAULT_VERSION" in environ:
        # Whether that version is served is checked by the app, which knows its specs.
        values["default_api_version"] = _integer(
            "API_DEFAULT_VERSION", environ["API_DEFAULT_VERSION"], 1, 9999
        )
    if "ALERT_WEBHOOK_URL" in environ:
        values["alert_webhook_url"] = _url(
            "ALERT_WEBHOOK_URL", environ["ALERT_WEBHOOK_URL"], ("http", "https")
        )
    return values


def _events_from_env(environ: Mapping[str, str]) -> dict:
    values = {}
    if "LOW_STOCK_THRESHOLD" in environ:
        values["low_stock_threshold"] = _integer(
            "LOW_STOCK_THRESHOLD", environ["LOW_STOCK_THRESHOLD"], 0, 2**31 - 1
        )
    if "WEBHOOK_ALLOW_PRIVATE" in environ:
        values["webhook_allow_private"] = _boolean(
            "WEBHOOK_ALLOW_PRIVATE", environ["WEBHOOK_ALLOW_PRIVATE"]
        )
    for name in ("WEBHOOK_TIMEOUT_SECONDS", "WEBHOOK_RETRY_BASE_SECONDS", "WEBHOOK_POLL_SECONDS"):
        if name in environ:
            values[name.lower()] = _positive_number(name, environ[name])
    if "WEBHOOK_MAX_ATTEMPTS" in environ:
        values["webhook_max_attempts"] = _integer(
            "WEBHOOK_MAX_ATTEMPTS", environ["WEBHOOK_MAX_ATTEMPTS"], 1, 100
        )
    if "WEBHOOK_WORKER_THREADS" in environ:
        values["webhook_worker_threads"] = _integer(
            "WEBHOOK_WORKER_THREADS", environ["WEBHOOK_WORKER_THREADS"], 1, 64
        )
    if "PUSH_TRANSPORT" in environ:
        if environ["PUSH_TRANSPORT"] not in ("log", "none"):
            raise ConfigurationError("PUSH_TRANSPORT must be log or none")
        values["push_transport"] = environ["PUSH_TRANSPORT"]
    return values
