"""The headers a response carries from what the layers inside learned about its request: the
caller's rate-limit usage (`RateLimit-*`), the API version (`API-Version`, `Vary: Accept`) and a
deprecated operation's `Deprecation`, `Sunset` and successor `Link`. Design: docs/pipeline.md."""

import datetime
import email.utils
import re

from asgi_correlation_id import correlation_id
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shopapi.contract.operations import Operation
from shopapi.pipeline.request_facts import operation_of


class ResponseHeadersMiddleware:
    """One layer for all three, outside CORS and Connexion's exception handling, so the errors
    made anywhere below (a 400 from validation, a 404, a 429) carry them too. The layers that
    learn the facts leave them in the scope's `state`: `rate_limit` (RateLimitMiddleware),
    `api_version` (ApiVersionMiddleware) and `operation` (RoutedOperationMiddleware). It notes
    the request's id there too, for the answer the server makes without the app
    (shopapi/pipeline/http_server.py's 408), which carries the same headers (`headers_for`)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope.setdefault("state", {})["request_id"] = correlation_id.get()

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = None
                for name, value in headers_for(scope):
                    if headers is None:
                        headers = MutableHeaders(scope=message)
                    if name == "Vary":  # one Vary, with CORS's Origin if it named that
                        headers.add_vary_header(value)
                    else:
                        headers.append(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)


def headers_for(scope: Scope):
    """The (name, value) pairs a response to the request of `scope` carries."""
    state = scope["state"]
    usage = state.get("rate_limit")
    if usage is not None:
        yield from usage.headers().items()
    # Set for every request of the versioned API: the version it was answered in, or "" for a
    # versioned path to a version not served (/v9/..., a 404 that names none).
    version = state.get("api_version")
    if version is not None:
        if version:
            yield "API-Version", version
        yield "Vary", "Accept"
    operation = operation_of(scope)
    if operation is not None and operation.deprecation:
        yield from deprecation_headers(operation, state.get("path_parameters", {}))


def _midnight(day: datetime.date) -> datetime.datetime:
    return datetime.datetime.combine(day, datetime.time(), tzinfo=datetime.UTC)


def deprecation_headers(operation: Operation, parameters: dict):
    """What a deprecated operation's contract says (`deprecated`, `x-deprecated-at`, `x-sunset`,
    `x-successor`), as RFC 9745's `Deprecation`, RFC 8594's `Sunset` and a successor `Link`
    with the request's path parameters filled in."""
    deprecation = operation.deprecation
    yield "Deprecation", f"@{int(_midnight(deprecation.since).timestamp())}"
    if deprecation.sunset:
        yield "Sunset", email.utils.format_datetime(_midnight(deprecation.sunset), usegmt=True)
    if deprecation.successor:
        successor = re.sub(
            r"\{(\w+)\}", lambda m: str(parameters.get(m[1], m[0])), deprecation.successor
        )
        yield "Link", f'<{operation.base_path}{successor}>; rel="successor-version"'
