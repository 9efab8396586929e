"""Starlette's private API, each use held by tests/test_internals.py (TestStarlette).

Starlette documents CORSMiddleware by its arguments only."""

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response


def preflight_response(cors: CORSMiddleware, headers: Headers) -> Response:
    """CORSMiddleware's answer to a preflight request with these headers (its undocumented
    `preflight_response`): shopapi/pipeline/cors.py rewrites a refusal as problem+json."""
    return cors.preflight_response(request_headers=headers)


# What the above relies on of Starlette's insides, checked against the installed release by
# tests/test_internals.py: (owner, name, the parameters it takes, or None for an attribute).
RELIED_UPON = [(CORSMiddleware, "preflight_response", ["self", "request_headers"])]
