"""A deprecated operation says so on every response: `Deprecation` (RFC 9745: since when),
`Sunset` (RFC 8594: when it stops answering) and a `Link` to its successor, all read from its
contract (`deprecated`, `x-deprecated-at`, `x-sunset`, `x-successor`)."""

import datetime
import email.utils
import re

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shopapi.contract.operations import Operation, route_pattern
from shopapi.pipeline.request_facts import operation_of


def _midnight(day: datetime.date) -> datetime.datetime:
    return datetime.datetime.combine(day, datetime.time(), tzinfo=datetime.UTC)


def _path_parameters(route: str, path: str) -> dict[str, str]:
    # Connexion keeps the path parameters in a scope of its own; the route template has them.
    match = route_pattern(route).fullmatch(path)
    return match.groupdict() if match else {}


def deprecation_headers(operation: Operation, path: str):
    deprecation = operation.deprecation
    yield "Deprecation", f"@{int(_midnight(deprecation.since).timestamp())}"
    if deprecation.sunset:
        yield "Sunset", email.utils.format_datetime(_midnight(deprecation.sunset), usegmt=True)
    if deprecation.successor:
        parameters = _path_parameters(operation.route, path)
        successor = re.sub(
            r"\{(\w+)\}", lambda m: parameters.get(m[1], m[0]), deprecation.successor
        )
        yield "Link", f'<{operation.base_path}{successor}>; rel="successor-version"'


class DeprecationMiddleware:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_deprecation(message: Message) -> None:
            if message["type"] == "http.response.start":
                operation = operation_of(scope)
                if operation and operation.deprecation:
                    headers = MutableHeaders(scope=message)
                    for name, value in deprecation_headers(operation, scope["path"]):
                        headers.append(name, value)
            await send(message)

        await self.app(scope, receive, send_with_deprecation)
