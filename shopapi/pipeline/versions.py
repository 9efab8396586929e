"""Which API version answers a request: its path's (`/v2/products`), else the one `Accept` asks
for, else the default; an unversioned path gets its version before routing, and the response
names it in `API-Version`. Design: docs/pipeline.md."""

import re

from asgi_correlation_id import correlation_id
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from shopapi.web.problems import problem_body

_VENDOR_TYPE = re.compile(r"application/vnd\.shopapi\.v(\d{1,4})\+json")
_VERSION_PARAMETER = re.compile(r"\d{1,4}")
_VERSIONED_PATH = re.compile(r"/v(\d{1,4})(?:/|$)")


def _media_ranges(accept: str):
    """(quality, media type, parameters) of each range of an Accept header (RFC 9110 12.5.1)."""
    for item in accept.split(","):
        media_type, *pairs = (part.strip() for part in item.split(";"))
        parameters = {}
        for pair in pairs:
            name, _, value = pair.partition("=")
            parameters[name.strip().lower()] = value.strip().strip('"')
        try:
            quality = float(parameters.pop("q", "1"))
        except ValueError:
            quality = 0.0  # a range that cannot say how acceptable it is counts as not at all
        yield quality, media_type.lower(), parameters


def requested_version(accept: str | None, served: tuple[int, ...], default: int) -> int | None:
    """The served version the client prefers; a range that names no version (`application/json`,
    `*/*`) takes the default. None when every acceptable range names a version not served."""
    if not accept:
        return default
    preferred = []
    for index, (quality, media_type, parameters) in enumerate(_media_ranges(accept)):
        if quality <= 0:
            continue
        vendor = _VENDOR_TYPE.fullmatch(media_type)
        if vendor:
            version = int(vendor[1])
        elif media_type == "application/json" and "version" in parameters:
            number = parameters["version"]
            version = int(number) if _VERSION_PARAMETER.fullmatch(number) else None
        else:
            version = default
        preferred.append((-quality, index, version))
    if not preferred:
        return default
    return next((v for _, _, v in sorted(preferred) if v in served), None)


class ApiVersionMiddleware:
    def __init__(
        self, app: ASGIApp, served: tuple[int, ...], default: int, unversioned: tuple[str, ...]
    ):
        self.app = app
        self.served = served
        self.default = default
        # Paths outside the versioned API, left as they are.
        self.unversioned = unversioned

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.unversioned:
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        versioned = _VERSIONED_PATH.match(path)
        if versioned:
            version = int(versioned[1])
        else:
            accept = Headers(scope=scope).get("accept")
            version = requested_version(accept, self.served, self.default)
            if version is None:
                await self._not_acceptable(scope, accept, receive, send)
                return
            # In place rather than on a copy: the layers outside this one read what Connexion's
            # router notes in this very scope.
            prefix = f"/v{version}"
            scope["path"] = prefix + path
            scope["raw_path"] = prefix.encode() + (scope.get("raw_path") or path.encode())
        # A versioned path names a version; only a served one is announced (/v9/... is a 404).
        # ResponseHeadersMiddleware puts it on the response (API-Version, Vary: Accept).
        announced = str(version) if version in self.served else ""
        scope.setdefault("state", {})["api_version"] = announced
        await self.app(scope, receive, send)

    async def _not_acceptable(self, scope: Scope, accept: str, receive: Receive, send: Send):
        versions = ", ".join(str(v) for v in self.served)
        detail = (
            f"No version asked for in Accept ({accept[:200]}) is served. Versions: {versions}; "
            f"ask for application/vnd.shopapi.v{self.served[-1]}+json, or use plain "
            f"application/json for version {self.default}."
        )
        body = problem_body(406, detail, instance=scope["path"], request_id=correlation_id.get())
        response = Response(
            body, 406, headers={"Vary": "Accept"}, media_type="application/problem+json"
        )
        await response(scope, receive, send)
