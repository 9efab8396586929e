"""A path is answered as it is: one that is not a route is a 404, never a redirect to a route it
nearly matches (Starlette's trailing-slash and Werkzeug's doubled-slash redirects are off).
Design: docs/pipeline.md."""

import connexion
from connexion.middleware.routing import RoutingMiddleware
from connexion.middleware.swagger_ui import SwaggerUIMiddleware
from starlette.routing import Mount, Router


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
    """Connexion's docs UI and contract routes, without Starlette's slash redirects."""

    def add_api(self, *args, **kwargs) -> None:
        super().add_api(*args, **kwargs)
        _without_slash_redirects(self.router)


def no_merge_slashes(app: connexion.FlaskApp) -> None:
    """Flask's routes of `app` match doubled slashes as they are (call before `add_api`)."""
    app.app.url_map.merge_slashes = False
