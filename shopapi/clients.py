"""Who a request comes from, as the traffic layers count it: the token's subject (an API key's
is `api-key:<id>`), else the network address. The rate limits count per client, and an
Idempotency-Key belongs to one."""

from starlette.types import Scope


def client_address(scope: Scope) -> str:
    client = scope.get("client")
    return client[0] if client else "unknown"


def client_of(scope: Scope) -> str:
    """`sub:<subject>` once Connexion's security has accepted credentials, else
    `address:<address>`."""
    token_info = scope.get("extensions", {}).get("connexion_context", {}).get("token_info")
    return f"sub:{token_info['sub']}" if token_info else f"address:{client_address(scope)}"
