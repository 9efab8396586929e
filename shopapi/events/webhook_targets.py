"""Which URLs may receive webhooks: http(s) to public addresses only, unless
WEBHOOK_ALLOW_PRIVATE, in plain spellings (no SSRF; docs/events.md tells the rules)."""

import ipaddress
import re
from urllib.parse import urlsplit

_LOOPBACK_NAMES = ("localhost", "localhost.localdomain")

# Global unicast: the only IPv6 space that is routed on the internet.
_IPV6_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")
# IPv6 forms of IPv4 addresses, and prefixes that reach IPv4 through a translator or a tunnel.
_IPV4_IN_IPV6 = tuple(
    ipaddress.IPv6Network(network)
    for network in (
        "::/96",  # IPv4-compatible, ::a.b.c.d (RFC 4291, deprecated)
        "::ffff:0:0/96",  # IPv4-mapped, ::ffff:a.b.c.d
        "::ffff:0:0:0/96",  # IPv4-translated (RFC 2765)
        "64:ff9b::/96",  # NAT64, well-known prefix (RFC 6052)
        "64:ff9b:1::/48",  # NAT64, local use (RFC 8215)
        "2001::/32",  # Teredo (RFC 4380)
        "2002::/16",  # 6to4 (RFC 3056)
    )
)
PRIVATE = "a private, loopback or reserved address"
IPV4_IN_IPV6 = "an IPv4 address in IPv6 form (mapped, compatible, NAT64, 6to4 or Teredo)"
# A host whose last label is a number is an IPv4 address to resolvers (inet_aton) and browsers
# (the WHATWG URL standard), however it is spelled.
_NUMBER = re.compile(r"[0-9]+|0x[0-9a-f]*")


def address_refusal(address: str) -> str | None:
    """Why a webhook may not go to this IP address, or None when it may: it must be a public
    (global) unicast address, and an IPv6 one must not carry an IPv4 address."""
    ip = ipaddress.ip_address(address)
    if ip.is_loopback or ip.is_unspecified:
        return PRIVATE
    if isinstance(ip, ipaddress.IPv6Address):
        if any(ip in network for network in _IPV4_IN_IPV6):
            return IPV4_IN_IPV6
        if ip not in _IPV6_GLOBAL_UNICAST:
            return PRIVATE
    if not ip.is_global or ip.is_multicast:
        return PRIVATE
    return None


def refusal(url: str, allow_private: bool) -> str | None:
    """Why `url` cannot receive webhooks, or None when it can."""
    try:
        parts = urlsplit(url)
    except ValueError:  # a bracketed host that is no IPv6 address, say
        return "is not a valid URL"
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
    host = parts.hostname.rstrip(".")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if "[" in parts.netloc:  # IPvFuture: nothing connects to it
            return "does not name a valid host"
    else:
        return None if allow_private else _address_refusal_of_url(host)
    try:
        # What the resolver will be asked: IDNA maps full-width digits and dots to ASCII ones.
        ascii_host = host.encode("idna").decode("ascii").lower()
    except UnicodeError:
        return "does not name a valid host"
    if _NUMBER.fullmatch(ascii_host.rpartition(".")[2]):
        # Not a name but an address spelled other than a.b.c.d: canonical ones parsed above.
        return "has an IPv4 address written other than as four decimal numbers (a.b.c.d)"
    if allow_private:
        return None
    if ascii_host in _LOOPBACK_NAMES or ascii_host.endswith(".localhost"):
        return "names this host (loopback addresses are refused)"
    return None  # a name: checked when the worker connects


def _address_refusal_of_url(host: str) -> str | None:
    reason = address_refusal(host)
    return None if reason is None else f"is {reason}"
