"""Which URLs may receive webhooks.

Only http and https, and (unless WEBHOOK_ALLOW_PRIVATE) only public addresses: a webhook must
not make the service call into its own host or network (SSRF). At registration the URL itself
is checked; a host name is checked again where it matters, when the worker connects
(shopapi/webhook_delivery.py), because what a name resolves to can change after registration.
"""

import ipaddress
from urllib.parse import urlsplit

_LOOPBACK_NAMES = ("localhost", "localhost.localdomain")


def is_public(address: str) -> bool:
    """Is this IP address on the public internet (not private, loopback, link-local, shared,
    multicast, reserved or unspecified)?"""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def refusal(url: str, allow_private: bool) -> str | None:
    """Why `url` cannot receive webhooks, or None when it can."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return "must be an http or https URL"
    if not parts.hostname:
        return "must name a host"
    if parts.username is not None or parts.password is not None:
        return "must not carry a user name or password"
    try:
        parts.port  # noqa: B018 (raises on a port that is not a number in range)
    except ValueError:
        return "has an invalid port"
    if allow_private:
        return None
    host = parts.hostname.rstrip(".")
    if host in _LOOPBACK_NAMES or host.endswith(".localhost"):
        return "names this host (loopback addresses are refused)"
    try:
        public = is_public(host)
    except ValueError:
        return None  # a name: checked when the worker connects
    return None if public else "is a private, loopback or reserved address"
