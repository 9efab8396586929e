"""The service's configuration: read once from the environment into one typed object."""

import dataclasses
import logging
import os
import secrets
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
    # PostgreSQL connections per worker process. Connexion runs Flask on a 10-thread pool, so a
    # smaller pool makes requests wait for a connection or fail under load.
    database_pool_size: int = 10
    max_body_bytes: int = 1024 * 1024
    # Signs list cursors. Generated when unset, which suits one process: workers that share
    # clients must share the secret.
    cursor_secret: bytes = dataclasses.field(default_factory=lambda: secrets.token_bytes(32))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> "Settings":
        """Build the settings from environment variables; a bad value raises ConfigurationError."""
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
        else:
            log.warning("CURSOR_SECRET is not set: using a generated one (fine for one process)")
        return cls(**values)
