"""The parsers of the settings' variables: each takes a variable's name and its value, and
answers the setting or raises ConfigurationError naming the variable."""

import ipaddress
import json
import pathlib
import re
import urllib.parse
from collections.abc import Callable
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec


class ConfigurationError(Exception):
    """A configuration value is unusable; the message names the variable."""


# A parser takes a variable's name and its value, and answers the setting or raises
# ConfigurationError naming the variable.
Parser = Callable[[str, str], Any]


def boolean(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ConfigurationError(f"{name} must be a boolean (1/0, true/false), not {raw!r}")


def integer(minimum: int, maximum: int) -> Parser:
    def parse(name: str, raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise ConfigurationError(f"{name} must be an integer, not {raw!r}") from None
        if not minimum <= value <= maximum:
            raise ConfigurationError(f"{name} must be between {minimum} and {maximum}, not {value}")
        return value

    return parse


def positive_number(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = 0
    if not 0 < value < 1e9:
        raise ConfigurationError(f"{name} must be a positive number, not {raw!r}")
    return value


def non_negative_number(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = -1
    if not 0 <= value < 1e9:
        raise ConfigurationError(f"{name} must be a number of 0 or more, not {raw!r}")
    return value


def secret(minimum_length: int) -> Parser:
    def parse(name: str, raw: str) -> bytes:
        if len(raw) < minimum_length:
            raise ConfigurationError(f"{name} must be at least {minimum_length} characters long")
        return raw.encode()

    return parse


def token(name: str, raw: str) -> str:
    return secret(16)(name, raw).decode()


def non_empty(name: str, raw: str) -> str:
    if not raw.strip():
        raise ConfigurationError(f"{name} must not be empty")
    return raw


def text_or_none(name: str, raw: str) -> str | None:
    return raw or None


def one_of(*choices: str) -> Parser:
    def parse(name: str, raw: str) -> str:
        if raw not in choices:
            raise ConfigurationError(f"{name} must be {' or '.join(choices)}")
        return raw

    return parse


def url(*schemes: str) -> Parser:
    def parse(name: str, raw: str) -> str:
        if urllib.parse.urlsplit(raw).scheme not in schemes or "://" not in raw:
            raise ConfigurationError(
                f"{name} must be a URL starting with one of {', '.join(schemes)}"
            )
        return raw

    return parse


def database_url(name: str, raw: str) -> str:
    if not raw.startswith(("sqlite:///", "postgresql://", "postgres://")):
        raise ConfigurationError(
            f"{name} must start with sqlite:/// or postgresql://, not {raw.split(':', 1)[0]!r}"
        )
    return raw


def replica_urls(name: str, raw: str) -> tuple[str, ...]:
    urls = tuple(url.strip() for url in raw.split(",") if url.strip())
    if not all(url.startswith(("postgresql://", "postgres://")) for url in urls):
        raise ConfigurationError(f"{name} must be comma-separated postgresql:// URLs")
    return urls


def pem_file(name: str, raw: str) -> str:
    try:
        text = pathlib.Path(raw).read_text()
    except OSError as error:
        raise ConfigurationError(f"{name}: cannot read {raw!r} ({error.strerror})") from None
    if "-----BEGIN" not in text:
        raise ConfigurationError(f"{name} must name a PEM file")
    return text


def p256_private_key_file(name: str, raw: str) -> str:
    """A PEM file of a P-256 private key, as ES256 signs with (VAPID, APNs): read and loaded here,
    so that a wrong key stops the start-up naming its variable, not the first notification."""
    text = pem_file(name, raw)
    try:
        key = serialization.load_pem_private_key(text.encode(), password=None)
    except (ValueError, TypeError) as error:
        # TypeError: an encrypted key (no password is given).
        raise ConfigurationError(
            f"{name}: {raw!r} holds no unencrypted private key ({error})"
        ) from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise ConfigurationError(f"{name} must be a P-256 (prime256v1) private key")
    return text


def trusted_issuers(name: str, raw: str) -> dict[str, str]:
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


def origins(name: str, raw: str) -> tuple[str, ...]:
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


def proxies(name: str, raw: str) -> tuple[str, ...]:
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


def vapid_subject(name: str, raw: str) -> str:
    """RFC 8292's `sub`: a contact for the push service, mailto: or https:."""
    if not raw.startswith(("mailto:", "https://")) or len(raw) < 10:
        raise ConfigurationError(f"{name} must be a mailto: or https: URL (a contact)")
    return raw


def ports(name: str, raw: str) -> tuple[int, ...]:
    entries = [entry.strip() for entry in raw.split(",") if entry.strip()]
    if not entries or not all(e.isdigit() and 1 <= int(e) <= 65535 for e in entries):
        raise ConfigurationError(
            f"{name} must list port numbers (1 to 65535), comma-separated, not {raw!r}"
        )
    return tuple(int(entry) for entry in entries)


def host_names(name: str, raw: str) -> tuple[str, ...]:
    """Comma-separated DNS names, kept in lower case without a trailing dot."""
    names = tuple(e.strip().lower().rstrip(".") for e in raw.split(",") if e.strip())
    label = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")
    for host in names:
        if not all(label.fullmatch(part) for part in host.split(".")):
            raise ConfigurationError(
                f"{name} must list host names, comma-separated (such as "
                f"push.services.mozilla.com,fcm.googleapis.com), not {host!r}"
            )
    return names


def service_account(name: str, raw: str) -> dict[str, str]:
    """A Google service-account key file (JSON), as the Firebase console downloads it."""
    try:
        key = json.loads(pathlib.Path(raw).read_text())
    except OSError as error:
        raise ConfigurationError(f"{name}: cannot read {raw!r} ({error.strerror})") from None
    except ValueError:
        key = None
    needed = ("project_id", "private_key", "client_email", "token_uri")
    if not isinstance(key, dict) or not all(isinstance(key.get(k), str) for k in needed):
        raise ConfigurationError(
            f"{name} must name a service-account key file (JSON with {', '.join(needed)})"
        )
    return {k: key[k] for k in (*needed, "private_key_id") if k in key}


def readable_file(name: str, raw: str) -> str:
    if not pathlib.Path(raw).is_file():
        raise ConfigurationError(f"{name}: {raw!r} is not a readable file")
    return raw
