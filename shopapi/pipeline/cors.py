"""CORS on every response, errors included: Starlette's CORSMiddleware, answering a refused
preflight with a problem document. Design: docs/pipeline.md."""

from asgi_correlation_id import correlation_id
from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from shopapi.internals.starlette import preflight_response
from shopapi.web.problems import problem_body

ALLOWED_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
# Beyond the CORS-safelisted ones (Accept, Content-Type, ...); the conditional ones let a browser
# revalidate and avoid lost updates (shopapi/web/etags.py); Last-Event-ID resumes an event stream
# that a script reads with its bearer token (an EventSource cannot send one).
ALLOWED_HEADERS = (
    "Authorization",
    "Idempotency-Key",
    "If-Match",
    "If-None-Match",
    "Last-Event-ID",
    "Prefer",
    "X-API-Key",
    "X-Request-ID",
)
# The response headers a browser script may read.
EXPOSED_HEADERS = (
    "API-Version",
    "Deprecation",
    "Idempotent-Replayed",
    "Sunset",
    "Link",
    "Location",
    "ETag",
    "Preference-Applied",
    "Retry-After",
    "RateLimit-Limit",
    "RateLimit-Remaining",
    "RateLimit-Reset",
    "RateLimit-Policy",
    "WWW-Authenticate",
    "X-Request-ID",
)
PREFLIGHT_MAX_AGE = 600


def is_preflight(scope: Scope) -> bool:
    """A CORS preflight: OPTIONS with Origin and Access-Control-Request-Method."""
    if scope["method"] != "OPTIONS":
        return False
    names = {name for name, _ in scope["headers"]}
    return b"origin" in names and b"access-control-request-method" in names


class Cors(CORSMiddleware):
    def __init__(self, app, origins: tuple[str, ...], allow_credentials: bool):
        super().__init__(
            app,
            allow_origins=origins,
            allow_methods=ALLOWED_METHODS,
            allow_headers=ALLOWED_HEADERS,
            allow_credentials=allow_credentials,
            expose_headers=EXPOSED_HEADERS,
            max_age=PREFLIGHT_MAX_AGE,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and is_preflight(scope):
            response = preflight_response(self, Headers(scope=scope))
            if response.status_code == 400:
                response = _refusal(scope, response)
            await response(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


def _refusal(scope: Scope, refused: Response) -> Response:
    # Starlette says "Disallowed CORS origin, method" in plain text.
    what = refused.body.decode().removeprefix("Disallowed CORS ")
    headers = {
        k: v for k, v in refused.headers.items() if k not in ("content-length", "content-type")
    }
    body = problem_body(
        400,
        f"This cross-origin request is not allowed (its {what}).",
        instance=scope["path"],
        request_id=correlation_id.get(),
    )
    return Response(body, 400, headers=headers, media_type="application/problem+json")
