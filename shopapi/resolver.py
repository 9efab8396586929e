"""Maps each operationId to its handler function.

Connexion pools the media types of all of an operation's responses, so once an operation
declares `application/problem+json` errors it cannot tell which type a handler's plain dict is
("Multiple response content types"). Handlers only ever return success bodies (errors are
raised), so every body a handler returns is declared `application/json` here, once.

Connexion also passes `user` and `token_info` to any handler taking `**kwargs` (the list
handlers, whose keyword arguments are the list's parameters); handlers ask for the caller with
shopapi.security.current_principal() instead, so those two are dropped here.

A request body reaches the handler in v1's form, whichever version it was sent in
(shopapi/representations.py).
"""

import functools

from connexion.resolver import Resolver

from shopapi import representations

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
    def resolve_function_from_operation_id(self, operation_id):
        return _as_json(super().resolve_function_from_operation_id(operation_id))
