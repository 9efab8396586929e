"""A path is answered as it is: one that is not a route is a 404, never a redirect to a route it
nearly matches (Starlette's trailing-slash and Werkzeug's doubled-slash redirects are off), nor
that route once an encoded slash is decoded. Design: docs/pipeline.md."""

import re

import connexion
from connexion.middleware.routing import RoutingMiddleware
from connexion.middleware.swagger_ui import SwaggerUIMiddleware
from starlette.exceptions import HTTPException
from starlette.routing import Mount, Router
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shopapi import docs_ui
from shopapi.docs_ui import DocsUIAPI
from shopapi.internals.connexion import router_of


def _without_slash_redirects(router: Router) -> None:
    """`router`, every router mounted in it and every router it falls back to: no redirects."""
    pending, seen = [router], set()
    while pending:
        current = pending.pop()
        if not isinstance(current, Router) or id(current) in seen:
            continue
        seen.add(id(current))
        current.redirect_slashes = False
        pending.append(current.default)  # the next API of the same base path, if any
        pending += [route.app for route in current.routes if isinstance(route, Mount)]


class ExactRoutingMiddleware(RoutingMiddleware):
    """Connexion's routing, without Starlette's slash redirects."""

    def add_api(self, *args, **kwargs) -> None:
        super().add_api(*args, **kwargs)
        _without_slash_redirects(router_of(self))


class ExactSwaggerUIMiddleware(SwaggerUIMiddleware):
    """Connexion's docs UI, with our page (shopapi/docs_ui) and its headers, and without
    Starlette's slash redirects. Only the docs' own paths go through its router: every other
    request would cross it to find no route there."""

    def __init__(self, app: ASGIApp):
        super().__init__(app)
        self.docs_paths: tuple[str, ...] = ()  # `/v1/ui`, ...: what the router may answer

    def add_api(self, specification, base_path=None, arguments=None, **kwargs) -> None:
        # SwaggerUIMiddleware.add_api, with DocsUIAPI for SwaggerUIAPI.
        api = DocsUIAPI(
            specification,
            base_path=base_path,
            arguments=arguments,
            default=self.default_fn,
            **kwargs,
        )
        router = router_of(self)
        router.mount(api.base_path, app=api.router)
        _without_slash_redirects(router)
        self.docs_paths = tuple(
            {
                mount.path + route.path.rstrip("/")
                for mount in router.routes
                if isinstance(mount, Mount)
                for route in mount.app.routes
            }
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and not any(
            path == docs or path.startswith(docs + "/") for docs in self.docs_paths
        ):
            # A copy, as Connexion's router below hands on when no route matches.
            await self.app(scope.copy(), receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *docs_ui.HEADERS]}
            await send(message)

        await super().__call__(scope, receive, send_with_headers)


# `/` and `\` percent-encoded, in either case.
_ENCODED_SEPARATOR = re.compile(rb"%(?:2f|5c)", re.IGNORECASE)


class EncodedSeparatorMiddleware:
    """A path holding `%2F` or `%5C` is a 404. The server decodes the path before anything routes
    it, so `/v1/products%2F1` would be served as `/v1/products/1`: a path that a proxy's rules,
    to which `%2F` is no separator (RFC 3986 2.2), never saw. No route has a segment with a
    slash in it (every path parameter is an id)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and _ENCODED_SEPARATOR.search(scope.get("raw_path") or b""):
            raise HTTPException(404, "No path here holds an encoded slash or backslash (%2F, %5C).")
        await self.app(scope, receive, send)


def no_merge_slashes(app: connexion.FlaskApp) -> None:
    """Flask's routes of `app` match doubled slashes as they are (call before `add_api`)."""
    app.app.url_map.merge_slashes = False
