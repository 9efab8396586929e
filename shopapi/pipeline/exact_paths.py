"""A path is answered as it is: one that is not a route is a 404, never a redirect to a route it
nearly matches (Starlette's trailing-slash and Werkzeug's doubled-slash redirects are off).
Design: docs/pipeline.md."""

import connexion
from connexion.middleware.routing import RoutingMiddleware
from connexion.middleware.swagger_ui import SwaggerUIMiddleware
from starlette.routing import Mount, Router
from starlette.types import ASGIApp, Receive, Scope, Send


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
        _without_slash_redirects(self.router)


class ExactSwaggerUIMiddleware(SwaggerUIMiddleware):
    """Connexion's docs UI, without Starlette's slash redirects. Only the docs' own paths go
    through its router: every other request would cross it to find no route there."""

    def __init__(self, app: ASGIApp):
        super().__init__(app)
        self.docs_paths: tuple[str, ...] = ()  # `/v1/ui`, ...: what the router may answer

    def add_api(self, *args, **kwargs) -> None:
        super().add_api(*args, **kwargs)
        _without_slash_redirects(self.router)
        self.docs_paths = tuple(
            {
                mount.path + route.path.rstrip("/")
                for mount in self.router.routes
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
        await super().__call__(scope, receive, send)


def no_merge_slashes(app: connexion.FlaskApp) -> None:
    """Flask's routes of `app` match doubled slashes as they are (call before `add_api`)."""
    app.app.url_map.merge_slashes = False
