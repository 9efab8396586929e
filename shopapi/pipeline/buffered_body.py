"""A request body read whole by an ASGI middleware, then handed on to the app inside it as if
it were still arriving."""

from starlette.types import Message, Receive


async def read_body(receive: Receive) -> bytes:
    """Every `http.request` message's bytes, up to the last one (or a disconnect)."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def replay_body(body: bytes, receive: Receive) -> Receive:
    """A receive channel that gives `body` in one message, then whatever `receive` gives (a
    disconnect)."""
    sent = False

    async def replay_receive() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay_receive
