"""The facts about a request that several layers need, found once and kept in its scope's
`state` (one dict shared by every layer, inside and outside the router): the operation it was
routed to and its path parameters, and the caller that the limits and Idempotency-Key count
it against."""

from starlette.types import ASGIApp, Receive, Scope, Send

from shopapi.contract.operations import Operation, Operations
from shopapi.internals import connexion as connexion_internals
from shopapi.pipeline.address_groups import address_group


class RoutedOperationMiddleware:
    """Right after Connexion's router: notes the operation it matched, for every layer."""

    def __init__(self, app: ASGIApp, operations: Operations):
        self.app = app
        self.operations = operations

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            state = scope["state"]
            state["operation"] = self.operations.get(*connexion_internals.routed_to(scope))
            # The path's parameters as the router matched them (a successor `Link` fills them in).
            state["path_parameters"] = scope.get("path_params", {})
        await self.app(scope, receive, send)


def operation_of(scope: Scope) -> Operation | None:
    """The operation the request was routed to; None before routing, or when none matched. A
    layer outside the router reads it once the layers inside have run."""
    return scope.get("state", {}).get("operation")


def caller_of(scope: Scope) -> str:
    """Who the request counts against, once Connexion's security has run: `sub:<subject>` of
    the accepted credentials (an API key's is `api-key:<id>`), else `address:<group>` (its
    address, an IPv6 one's /64: address_groups.py)."""
    state = scope["state"]
    caller = state.get("caller")
    if caller is None:
        token_info = connexion_internals.token_info(scope)
        caller = state["caller"] = (
            f"sub:{token_info['sub']}"
            if token_info
            else f"address:{address_group(client_address(scope))}"
        )
    return caller


def client_address(scope: Scope) -> str:
    client = scope.get("client")
    return client[0] if client else "unknown"


def revalidates(scope: Scope, operation: Operation) -> bool:
    """Whether the request revalidates a copy it holds: a GET with If-None-Match, which its
    operation declares, so that its answer may be a 304."""
    return (
        operation.method == "GET"
        and "if-none-match" in operation.header_parameters
        and any(name == b"if-none-match" for name, _ in scope["headers"])
    )
