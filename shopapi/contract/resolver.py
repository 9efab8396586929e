"""Maps each operationId to its handler, wrapped: success bodies declared JSON, request bodies in
v1's form, the operation's ETag behaviour. Why: docs/contract.md."""

import functools

import flask
from connexion.resolver import Resolution, Resolver

from shopapi.contract.operations import Operations
from shopapi.web import etags, representations

_JSON = {"Content-Type": "application/json"}


def _as_json(handler):
    @functools.wraps(handler)
    def wrapper(*args, user=None, token_info=None, **kwargs):
        if "body" in kwargs:
            kwargs["body"] = representations.read(kwargs["body"])
        result = handler(*args, **kwargs)
        if not isinstance(result, tuple):
            result = (result,)
        body, status, headers = (*result, None, None)[:3]
        if body is None:
            return None, status or 204, headers or {}
        return body, status or 200, {**_JSON, **(headers or {})}

    return wrapper


def _untyped_when_empty(handler):
    """A 204 has no body, and so no media type: left to Connexion, it would name the only type
    the operation declares, its errors' problem+json. (Werkzeug drops a 304's itself.)"""

    @functools.wraps(handler)
    def wrapper(*args, **kwargs):
        body, status, headers = handler(*args, **kwargs)
        if status != 204:
            return body, status, headers
        response = flask.Response(status=204, headers=headers)
        del response.headers["Content-Type"]
        return response

    return wrapper


class HandlerResolver(Resolver):
    def __init__(self, operations: Operations, base_path: str):
        """`operations`: those of the contract served at `base_path`, which this resolver
        resolves."""
        super().__init__()
        self.operations = operations
        self.base_path = base_path

    def resolve(self, operation):
        operation_id = self.resolve_operation_id(operation)
        handler = _as_json(self.resolve_function_from_operation_id(operation_id))
        declared = self.operations.at(self.base_path + operation.path, operation.method)
        handler = etags.conditional(handler, declared)
        handler = _untyped_when_empty(handler)
        return Resolution(handler, operation_id)
