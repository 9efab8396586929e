"""uvicorn's private API, each use held by tests/test_internals.py (TestUvicorn).

uvicorn documents its server's options (`--http httptools`), not the protocol classes behind
them: shopapi/pipeline/http_server.py subclasses its httptools protocol and its flow control
(both in the undocumented uvicorn.protocols package) to add the limits uvicorn lacks, and
needs what follows of their insides."""

import asyncio

from uvicorn.protocols.http.flow_control import FlowControl as _FlowControl
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

__all__ = ["HttpToolsProtocol"]  # undocumented, subclassed as it is


class FlowControl(_FlowControl):
    """uvicorn's flow control (undocumented), its private transport and "the client has taken
    what was buffered" event named, for a drain that gives up."""

    @property
    def transport(self) -> asyncio.Transport:
        return self._transport

    @property
    def writable(self) -> asyncio.Event:
        return self._is_writable_event


def should_upgrade(protocol: HttpToolsProtocol) -> bool:
    """Whether uvicorn hands the connection to its WebSocket protocol once this request's head
    is complete (its private `_should_upgrade`)."""
    return protocol._should_upgrade()


def status_line(status: int) -> bytes:
    """`HTTP/1.1 <status> <phrase>\\r\\n` as uvicorn writes it (its undocumented STATUS_LINE)."""
    return STATUS_LINE[status]


def default_headers(protocol: HttpToolsProtocol) -> list[tuple[bytes, bytes]]:
    """The headers uvicorn adds to every response (`server`, `date`), from its undocumented
    server state."""
    return list(getattr(protocol.server_state, "default_headers", []))


def waits_for_the_app(protocol: HttpToolsProtocol) -> bool:
    """Whether the request's body waits for the app, not for its client: uvicorn has paused
    reading until the app takes what came (its undocumented flow control's `read_paused`), or has
    not yet sent the `100 Continue` the client waits for (its cycle's
    `waiting_for_100_continue`)."""
    cycle = protocol.cycle
    waiting = cycle is not None and cycle.waiting_for_100_continue
    return protocol.flow.read_paused or waiting


def end_cycle(protocol: HttpToolsProtocol) -> None:
    """End the app's request cycle at once, as if its client had gone: marked disconnected, its
    wait for the body woken (uvicorn's undocumented RequestResponseCycle). Nothing more of the
    app's response is written."""
    cycle = protocol.cycle
    if cycle is not None and not cycle.response_complete:
        cycle.disconnected = True
        cycle.message_event.set()


# What the above relies on of uvicorn's insides, checked against the installed release by
# tests/test_internals.py: (owner, name, the parameters it takes, or None for an attribute).
RELIED_UPON = [
    (_FlowControl, "_transport", None),
    (_FlowControl, "_is_writable_event", None),
    (_FlowControl, "read_paused", None),
    (HttpToolsProtocol, "_should_upgrade", ["self"]),
    (HttpToolsProtocol, "server_state", None),
    (HttpToolsProtocol, "cycle", None),
    # What shopapi/pipeline/http_server.py's subclass overrides and reads, undocumented too.
    (HttpToolsProtocol, "connection_made", ["self", "transport"]),
    (HttpToolsProtocol, "connection_lost", ["self", "exc"]),
    (HttpToolsProtocol, "data_received", ["self", "data"]),
    (HttpToolsProtocol, "on_message_begin", ["self"]),
    (HttpToolsProtocol, "on_url", ["self", "url"]),
    (HttpToolsProtocol, "on_header", ["self", "name", "value"]),
    (HttpToolsProtocol, "on_headers_complete", ["self"]),
    (HttpToolsProtocol, "on_body", ["self", "body"]),
    (HttpToolsProtocol, "on_message_complete", ["self"]),
    (HttpToolsProtocol, "on_response_complete", ["self"]),
    (HttpToolsProtocol, "send_400_response", ["self", "msg"]),
    (HttpToolsProtocol, "parser", None),
    (HttpToolsProtocol, "flow", None),
    (HttpToolsProtocol, "headers", None),
    (HttpToolsProtocol, "pipeline", None),
    (HttpToolsProtocol, "transport", None),
    (HttpToolsProtocol, "loop", None),
    (HttpToolsProtocol, "logger", None),
    (RequestResponseCycle, "response_started", None),
    (RequestResponseCycle, "response_complete", None),
    (RequestResponseCycle, "disconnected", None),
    (RequestResponseCycle, "message_event", None),
    (RequestResponseCycle, "waiting_for_100_continue", None),
    (HttpToolsProtocol, "client", None),
]
