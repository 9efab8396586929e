"""ETags and conditional requests (RFC 9110 §8.8.3, §13.1): tags hashed from representations,
If-None-Match (304), If-Match (412), as each operation declares. The rules: docs/web.md."""

import base64
import functools
import hashlib
import re

import flask
import orjson
from connexion.exceptions import ProblemException

from models.db import database
from shopapi.web.jsonifier import OPTIONS
from shopapi.web.representations import shown_as_at_its_path

# The jsonifier's rendering (compact, times as clients see them) with sorted keys, so that equal
# representations hash alike in whatever order a handler built them.
_CANONICAL = OPTIONS | orjson.OPT_SORT_KEYS
# An entity-tag: `W/` when weak, then an opaque quoted string (which may contain commas).
_ENTITY_TAG = re.compile(r'(W/)?"([^"]*)"')
_JSON = "application/json"


def tag_of(representation, *, weak: bool = False) -> str:
    """The entity-tag of a representation: base64url SHA-256 of its canonical JSON."""
    digest = hashlib.sha256(orjson.dumps(representation, option=_CANONICAL)).digest()
    opaque = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
    return f'W/"{opaque}"' if weak else f'"{opaque}"'


def list_tag(*facts) -> str:
    """A list's weak entity-tag from what its page is a function of (the versions of the tables
    it reads, its query, the request), known before the page is read."""
    digest = hashlib.sha256(orjson.dumps(facts, option=_CANONICAL, default=str)).digest()
    return f'W/"{base64.urlsafe_b64encode(digest).rstrip(b"=").decode()}"'


def revalidated(tag: str) -> bool:
    """Whether the request revalidates a copy whose tag is `tag`, for an operation that declares
    If-None-Match: the handler may then answer 304 without reading what it would have sent."""
    condition = flask.g.get("revalidating")
    return condition is not None and matches_weakly(condition, tag)


def _listed(field_value: str) -> list[tuple[bool, str]]:
    """(weak, opaque) of each entity-tag in an If-Match or If-None-Match field value."""
    return [(bool(weak), opaque) for weak, opaque in _ENTITY_TAG.findall(field_value)]


def matches_weakly(field_value: str, tag: str) -> bool:
    """If-None-Match: `*` (there is a current representation), or any listed tag with the same
    opaque value, weak or not (weak comparison, §8.8.3.2)."""
    if field_value.strip() == "*":
        return True
    _, opaque = _listed(tag)[0]
    return any(listed == opaque for _, listed in _listed(field_value))


def matches_strongly(field_value: str, tag: str) -> bool:
    """If-Match: `*` (the resource exists), or a listed strong tag equal to the strong `tag`
    (strong comparison: a weak tag never matches)."""
    if field_value.strip() == "*":
        return True
    return any(not weak and f'"{opaque}"' == tag for weak, opaque in _listed(field_value))


class PreconditionFailed(ProblemException):
    """412: the resource is no longer the one the client read."""

    def __init__(self, thing: str):
        super().__init__(
            status=412,
            title="Precondition Failed",
            detail=(
                f"The {thing} has changed since you read it: If-Match does not match its "
                "current ETag, so nothing was changed. GET it again for its current state and "
                "ETag, and send your change again with that ETag if it still applies."
            ),
        )


def if_match(row, represent):
    """`row`, when the request's If-Match (if it has one) matches the strong ETag of
    `represent(row)` as the request's version shows it at its path (its GET's tag); otherwise
    PreconditionFailed, before anything changes.

    `row` must have been read locked (BaseModel.get_for_update) inside the transaction that
    `conditional` opens for a request with If-Match, and be changed in it. A missing or
    unreachable row has already answered 404: preconditions never reveal what a client may not
    see."""
    field_value = flask.request.headers.get("If-Match")
    if field_value is None:
        return row
    if not database.in_transaction():
        # The check would not hold until the change: the operation must declare If-Match.
        raise RuntimeError("If-Match checked outside a transaction: declare it in the spec")
    if not matches_strongly(field_value, tag_of(shown_as_at_its_path(represent(row)))):
        raise PreconditionFailed(type(row).__name__.lower())
    return row


def conditional(handler, operation):
    """`handler`, which answers `(body, status, headers)`, with the ETag behaviour that its
    operation declares (an Operation of shopapi/contract/operations.py: an `ETag` header on its
    200, `If-None-Match` or `If-Match` among its header parameters, `x-list-of`); `handler`
    itself when it declares none."""
    tagged = "etag" in operation.success_headers
    weak = operation.list_of is not None
    revalidates = operation.method == "GET" and "if-none-match" in operation.header_parameters
    guarded = "if-match" in operation.header_parameters
    if not (tagged or guarded):
        return handler

    @functools.wraps(handler)
    def wrapper(*args, **kwargs):
        condition = flask.request.headers.get("If-None-Match") if revalidates else None
        flask.g.revalidating = condition
        if guarded and "If-Match" in flask.request.headers:
            with database.atomic():
                body, status, headers = handler(*args, **kwargs)
        else:
            body, status, headers = handler(*args, **kwargs)
        if status == 304:  # the handler found the copy current (`revalidated`) before reading it
            return None, 304, {"Content-Type": _JSON, **headers}
        if not tagged or status != 200:
            return body, status, headers
        # A handler that knows its tag before its body (`list_tag`) gives it.
        tag = headers.get("ETag") or tag_of(body, weak=weak)
        if condition is not None and matches_weakly(condition, tag):
            # No body. Connexion insists on knowing a content type; werkzeug drops it from a 304
            # along with the other representation headers (RFC 9110 §15.4.5).
            return None, 304, {"Content-Type": headers["Content-Type"], "ETag": tag}
        return body, status, {**headers, "ETag": tag}

    return wrapper
