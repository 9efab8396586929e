"""Request bodies are at most `max_bytes`: 413 beyond, whether the size is announced in
Content-Length or found while a chunked body streams in; a chunked body is passed on with a
Content-Length. A body cut off is never passed on as whole. Design: docs/pipeline.md."""

from connexion.exceptions import ProblemException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shopapi.pipeline.buffered_body import read_body, replay_body


class PayloadTooLarge(ProblemException):
    def __init__(self, max_bytes: int):
        super().__init__(
            status=413,
            title="Content Too Large",
            detail=f"The request body is larger than {max_bytes} bytes.",
        )


class BodyCutOff(ProblemException):
    """The connection ended before the body did: its client left, or the server gave up on it
    (shopapi/pipeline/http_server.py, which has told the client 408)."""

    def __init__(self):
        super().__init__(
            status=408,
            title="Request Timeout",
            detail="The request's body did not arrive whole.",
        )


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        if length is not None:
            if length.isdigit() and int(length) > self.max_bytes:
                raise PayloadTooLarge(self.max_bytes)
            await self.app(scope, self._limited(receive), send)
        elif b"transfer-encoding" in headers:
            body = await read_body(self._limited(receive))
            scope = dict(scope)
            scope["headers"] = [
                *((k, v) for k, v in scope["headers"] if k != b"transfer-encoding"),
                (b"content-length", str(len(body)).encode()),
            ]
            await self.app(scope, replay_body(body, receive), send)
        else:
            await self.app(scope, receive, send)

    def _limited(self, receive: Receive) -> Receive:
        received = 0
        whole = False

        async def limited_receive() -> Message:
            nonlocal received, whole
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise PayloadTooLarge(self.max_bytes)
                whole = not message.get("more_body", False)
            elif not whole:
                # Connexion's validation and read_body take a disconnect for the body's end:
                # the part that came would be handled as the whole body, and a chunked one has
                # no Content-Length to be found short by.
                raise BodyCutOff
            return message

        return limited_receive
