"""A request body's media type, read the same way by every layer: its Content-Type as RFC 9110
(8.3.1) reads it, type and subtype case-insensitive, and none assumed when none is sent.

Connexion finds a body's schema and validator by the Content-Type exactly as sent, so a body
sent as `APPLICATION/JSON` found neither and reached the handler unchecked (a NUL in a form's
`username` then reached PostgreSQL); it takes a body sent without a Content-Type for the
operation's first media type, which Flask, reading the body for the handler, does not; and it
fails (500) on a Content-Type with no `/`, or with one in a parameter, when it hands the body
to a handler. This middleware runs just before Connexion's request validation and

- for an operation that takes a body: answers 415 to a body sent without a Content-Type, or
  with one that is no media type, and 400 to more than one Content-Type (Connexion reads the
  first, Flask all of them); otherwise writes the Content-Type as its media type alone, in lower
  case (`APPLICATION/JSON; charset=UTF-8` becomes `application/json`), so that validation,
  Flask and the handler all see the media type the contract names. The parameters mean nothing
  to the types the contract takes: JSON is UTF-8 (RFC 8259) and so are forms here, whatever a
  `charset` says;
- for an operation that takes none: drops the Content-Type, which describes nothing it reads.
"""

import re

from connexion.exceptions import BadRequestProblem, UnsupportedMediaTypeProblem
from starlette.types import ASGIApp, Receive, Scope, Send

from shopapi.contract.operations import Operation
from shopapi.pipeline.request_facts import operation_of

# type "/" subtype, each an RFC 9110 token (lower case by now).
_MEDIA_TYPE = re.compile(rb"[!#$%&'*+.^_`|~0-9a-z-]+/[!#$%&'*+.^_`|~0-9a-z-]+")


def media_type_of(content_type: bytes) -> bytes | None:
    """The media type of a Content-Type value in lower case, without its parameters; None when
    the value names none."""
    media_type = content_type.partition(b";")[0].strip().lower()
    return media_type if _MEDIA_TYPE.fullmatch(media_type) else None


def _has_body(headers: list[tuple[bytes, bytes]]) -> bool:
    # BodyLimitMiddleware, outside this one, has given a chunked body its Content-Length.
    for name, value in headers:
        if name == b"content-length":
            return value.strip() not in (b"", b"0")
        if name == b"transfer-encoding":
            return True
    return False


def _unsupported(operation: Operation, why: str) -> UnsupportedMediaTypeProblem:
    expected = ", ".join(operation.media_types)
    return UnsupportedMediaTypeProblem(detail=f"{why}; send it as one of {expected}.")


class MediaTypeMiddleware:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        operation = operation_of(scope) if scope["type"] == "http" else None
        if operation is not None:
            # In place: the layers outside this one read the same headers.
            scope["headers"] = self._headers(operation, scope["headers"])
        await self.app(scope, receive, send)

    @staticmethod
    def _headers(operation: Operation, headers: list) -> list:
        others = [(name, value) for name, value in headers if name != b"content-type"]
        content_types = [value for name, value in headers if name == b"content-type"]
        if not operation.media_types:
            return others
        if len(content_types) > 1:
            raise BadRequestProblem(detail="The request has more than one Content-Type.")
        if not content_types:
            if _has_body(headers):
                raise _unsupported(operation, "The request body has no Content-Type")
            return others
        media_type = media_type_of(content_types[0])
        if media_type is None:
            raise _unsupported(operation, "The request's Content-Type names no media type")
        return [*others, (b"content-type", media_type)]
