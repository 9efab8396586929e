"""A request body's media type, read the same way by every layer as RFC 9110 reads it: the
Content-Type becomes its media type alone, in lower case; 415 without one, 400 for two; dropped
when the operation takes no body. Design: docs/pipeline.md."""

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
