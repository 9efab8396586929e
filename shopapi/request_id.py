"""X-Request-ID: taken from the request when it looks like an id, else generated; echoed on
every response (errors included) and available to every layer through the ASGI scope, and to
the log lines written while the request is handled through `current_request_id`."""

import contextvars
import re
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = b"x-request-id"
# Anything else (too long, control characters, spaces) could forge log lines: replace it.
_SANE = re.compile(rb"[A-Za-z0-9._:-]{1,128}")


current_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "current_request_id", default=None
)


def request_id_of(scope: Scope) -> str | None:
    return scope.get("state", {}).get("request_id")


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        offered = dict(scope["headers"]).get(HEADER, b"")
        request_id = offered.decode() if _SANE.fullmatch(offered) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        encoded = request_id.encode()

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != HEADER]
                message["headers"] = [*headers, (HEADER, encoded)]
            await send(message)

        token = current_request_id.set(request_id)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            current_request_id.reset(token)
