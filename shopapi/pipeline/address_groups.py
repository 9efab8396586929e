"""The client an address-keyed limit counts: an IPv4 address, or an IPv6 address's /64. Every
such limit (the rate limits, refused credentials, failed logins, bodies in flight) keys on this."""

import functools
import ipaddress

from shopapi.pipeline.forwarded import ip_address

# Addresses whose group is remembered: a request's is found once, not parsed again.
_REMEMBERED = 4096


@functools.lru_cache(maxsize=_REMEMBERED)
def address_group(address: str) -> str:
    """`address` in one spelling, or its /64 when it is IPv6: one host's (privacy extensions
    give it a new address a day) and the least any client of IPv6 has to pick addresses from
    (RFC 7421). Anything that is not an address ("unknown") is its own group."""
    parsed = ip_address(address)
    if parsed is None:
        return address
    if parsed.version == 6:
        return str(ipaddress.IPv6Network((parsed, 64), strict=False))
    return str(parsed)
