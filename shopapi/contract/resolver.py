"""Maps each operationId to its handler, wrapped: the request body read and the answer shown as the
operation's version of the contract says (its shapes), success bodies declared JSON, the
operation's ETag behaviour. Why: docs/contract.md."""

import functools

import flask
from connexion.resolver import Resolution, Resolver

from shopapi.contract.operations import Operations
from shopapi.contract.shapes import OperationShapes
from shopapi.web import etags
from shopapi.web.representations import selected

_JSON = {"Content-Type": "application/json"}


def _in_version(handler, shapes: OperationShapes):
    """The handler, given its body in its own form and its answer shown in the operation's
    version (`shapes`), the list language's `fields` selected last; a success declared JSON."""

    @functools.wraps(handler)
    def wrapper(*args, user=None, token_info=None, **kwargs):
        if shapes.reading is not None and isinstance(kwargs.get("body"), dict):
            kwargs["body"] = shapes.reading(kwargs["body"])
        flask.g.resource_shape = shapes.resource  # for If-Match (etags.if_match)
        result = handler(*args, **kwargs)
        if not isinstance(result, tuple):
            result = (result,)
        body, status, headers = (*result, None, None)[:3]
        if body is None:
            return None, status or 204, headers or {}
        status = status or 200
        shape = shapes.answers.get(status)
        if shape is not None and isinstance(body, dict):
            body = shape(body)
        if shapes.listed and kwargs.get("fields") and status == 200:
            body = selected(body, kwargs["fields"], shapes.kept)
        return body, status, {**_JSON, **(headers or {})}

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
    def __init__(
        self,
        operations: Operations,
        shapes: dict[tuple[str, str], OperationShapes],
        base_path: str,
    ):
        """`operations`: those of the contract served at `base_path`, which this resolver
        resolves; `shapes`: theirs (shopapi/contract/shapes.py)."""
        super().__init__()
        self.operations = operations
        self.shapes = shapes
        self.base_path = base_path

    def resolve(self, operation):
        operation_id = self.resolve_operation_id(operation)
        shapes = self.shapes[(operation.path, operation.method.upper())]
        handler = _in_version(self.resolve_function_from_operation_id(operation_id), shapes)
        declared = self.operations.at(self.base_path + operation.path, operation.method)
        handler = etags.conditional(handler, declared)
        handler = _untyped_when_empty(handler)
        return Resolution(handler, operation_id)
