"""Maps each operationId to its handler function.

Connexion pools the media types of all of an operation's responses, so once an operation
declares `application/problem+json` errors it cannot tell which type a handler's plain dict is
("Multiple response content types"). Handlers only ever return success bodies (errors are
raised), so every body a handler returns is declared `application/json` here, once.

Connexion also passes `user` and `token_info` to any handler taking `**kwargs` (the list
handlers, whose keyword arguments are the list's parameters); handlers ask for the caller with
shopapi.auth.security.current_principal() instead, so those two are dropped here.

A request body reaches the handler in v1's form, whichever version it was sent in
(shopapi/web/representations.py).

The resolver sees every operation of the contract, so it also gives each handler the ETag
behaviour its operation declares (shopapi.web.etags).
"""

import functools

from connexion.resolver import Resolution, Resolver

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


class HandlerResolver(Resolver):
    def __init__(self, spec: dict):
        """`spec`: the contract whose operations this resolver resolves."""
        super().__init__()
        self.spec = spec

    def resolve(self, operation):
        operation_id = self.resolve_operation_id(operation)
        handler = _as_json(self.resolve_function_from_operation_id(operation_id))
        handler = etags.conditional(handler, self.spec, operation.path, operation.method)
        return Resolution(handler, operation_id)
