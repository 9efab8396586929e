"""Small pieces of the success responses that every collection shares."""

import flask


def created(body: dict, resource_id: int):
    """201 with the created resource and its URL in `Location` (relative to this request's
    collection path, so it names the same API version the client used)."""
    return body, 201, {"Location": f"{flask.request.path.rstrip('/')}/{resource_id}"}
