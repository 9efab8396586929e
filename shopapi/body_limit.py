"""Request bodies are at most `max_bytes`: 413 beyond, whether the size is announced in
Content-Length or only discovered while a chunked body streams in."""

from connexion.exceptions import ProblemException
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class PayloadTooLarge(ProblemException):
    def __init__(self, max_bytes: int):
        super().__init__(
            status=413,
            title="Content Too Large",
            detail=f"The request body is larger than {max_bytes} bytes.",
        )


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            raise PayloadTooLarge(self.max_bytes)
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise PayloadTooLarge(self.max_bytes)
            return message

        await self.app(scope, counting_receive, send)
