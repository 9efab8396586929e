"""a2wsgi's private API, each use held by tests/test_internals.py (TestA2wsgi).

a2wsgi documents its WSGIMiddleware, not the functions inside it: the service's own bridge
(shopapi/pipeline/wsgi_bridge.py) builds each request's WSGI environ as a2wsgi does."""

import io

import a2wsgi.wsgi
from a2wsgi.wsgi import build_environ
from starlette.types import Scope


def wsgi_environ(scope: Scope, body: bytes) -> dict:
    """The PEP 3333 environ of an ASGI HTTP request whose whole body is `body` (a2wsgi's
    undocumented `a2wsgi.wsgi.build_environ`)."""
    return build_environ(scope, io.BytesIO(body))


# What the above relies on of a2wsgi's insides, checked against the installed release by
# tests/test_internals.py: (owner, name, the parameters it takes, or None for an attribute).
RELIED_UPON = [(a2wsgi.wsgi, "build_environ", ["scope", "body"])]
