"""Which Web Push endpoints may receive notifications: the webhooks' rule (public addresses), over
https, on port 443 or another of WEBPUSH_PORTS, and at one of WEBPUSH_HOSTS when set. Checked
at registration and again when the worker sends. WEBPUSH_ALLOW_PRIVATE lifts all but the hosts."""

import dataclasses
from urllib.parse import urlsplit

from shopapi.events import webhook_targets
from shopapi.settings import Settings


@dataclasses.dataclass(frozen=True)
class EndpointRule:
    allow_private: bool = False
    ports: tuple[int, ...] = (443,)
    # Push services' host names, each with its subdomains; empty: any host.
    hosts: tuple[str, ...] = ()

    @classmethod
    def of(cls, settings: Settings) -> "EndpointRule":
        return cls(settings.webpush_allow_private, settings.webpush_ports, settings.webpush_hosts)

    def refusal(self, endpoint: str) -> str | None:
        """Why `endpoint` may not receive notifications (completing "The endpoint ..."), or
        None when it may."""
        reason = webhook_targets.refusal(endpoint, self.allow_private)
        if reason is not None:
            return reason
        parts = urlsplit(endpoint)
        if not self.allow_private:
            if parts.scheme.lower() != "https":
                return "must be an https URL"
            # An explicit :0 is a port too (and not the default).
            port = 443 if parts.port is None else parts.port
            if port not in self.ports:
                listed = " or ".join(str(p) for p in self.ports)
                return f"must use port {listed}"
        if self.hosts and not self._at_a_known_host(parts.hostname):
            return "is not at a push service this server sends to"
        return None

    def _at_a_known_host(self, hostname: str) -> bool:
        try:
            host = hostname.rstrip(".").encode("idna").decode("ascii").lower()
        except UnicodeError:
            return False
        return any(host == known or host.endswith(f".{known}") for known in self.hosts)
