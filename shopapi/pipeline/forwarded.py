"""The client's address behind the proxies the operator named (FORWARDED_ALLOW_IPS): their
`X-Forwarded-For` and `X-Forwarded-Proto` are believed, anyone else's ignored. Design:
docs/pipeline.md."""

import ipaddress
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def ip_address(value: str) -> IPAddress | None:
    """`value` as an address, or None when it is not one. A port (`1.2.3.4:80`, `[::1]:80`) and
    IPv6 brackets are dropped and an IPv4-mapped IPv6 address is its IPv4 one, so that one
    address has one spelling; a zone (`fe80::1%eth0`) is not an address a proxy forwards."""
    value = value.strip()
    if value.startswith("["):
        value, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not (rest[0] == ":" and rest[1:].isdigit())):
            return None
    elif value.count(":") == 1:
        value, _, port = value.partition(":")
        if not port.isdigit():
            return None
    if "%" in value:
        return None
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


class TrustedProxies:
    """The proxies whose forwarded headers are believed: addresses and networks
    (`10.0.0.5`, `10.0.0.0/8`, `2001:db8::/32`)."""

    def __init__(self, entries: Iterable[str] = ()):
        self.networks = tuple(ipaddress.ip_network(entry.strip()) for entry in entries)

    def __bool__(self) -> bool:
        return bool(self.networks)

    def trust(self, address: IPAddress | None) -> bool:
        return address is not None and any(address in network for network in self.networks)

    def client(self, peer: str, forwarded_for: str) -> str | None:
        """The address the request comes from, when `peer` is a trusted proxy that forwards it
        (else None: the peer is the client). `forwarded_for` is X-Forwarded-For, to which each
        proxy appends the address it heard from: read from the right, the first address that
        is not a trusted proxy's is the client's. A value that is not an address is ignored,
        with everything a client may have put before it: the request then counts as the last
        trusted proxy's."""
        hop = ip_address(peer)
        if not self.trust(hop):
            return None
        for entry in reversed(forwarded_for.split(",")):
            address = ip_address(entry)
            if address is None:
                break
            hop = address
            if not self.trust(address):
                break
        return str(hop)


class ForwardedHeadersMiddleware:
    """Gives a request forwarded by a trusted proxy the client's address (`X-Forwarded-For`) and
    scheme (`X-Forwarded-Proto`), as the ASGI scope's `client` and `scheme`, for every layer
    after it (the rate limits, the request log, Flask's REMOTE_ADDR). Requests from anyone else
    keep their peer's, whatever headers they carry."""

    def __init__(self, app: ASGIApp, proxies: TrustedProxies):
        self.app = app
        self.proxies = proxies

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        peer = scope.get("client")
        if scope["type"] == "http" and peer:
            forwarded_for, proto = [], None
            for name, value in scope["headers"]:
                if name == b"x-forwarded-for":
                    forwarded_for.append(value.decode("latin-1"))
                elif name == b"x-forwarded-proto":
                    proto = value.decode("latin-1").strip().lower()
            client = self.proxies.client(peer[0], ",".join(forwarded_for))
            if client is not None:
                if client != peer[0]:
                    scope["client"] = (client, 0)
                if proto in ("http", "https"):
                    scope["scheme"] = proto
        await self.app(scope, receive, send)
