"""A list revalidated (`If-None-Match`) as before, answered 304 here rather than by Flask: the
same request by the same caller, whose handler made the list's tag from the versions of the
tables it reads (shopapi/web/remembered_lists.py), gets the same tag while those versions stand.
Why that is the handler's own answer: docs/pipeline.md."""

import hashlib

import peewee
from starlette.types import ASGIApp, Receive, Scope, Send

from models import off_loop, table_versions
from models.db import database
from shopapi.auth.security import Principal
from shopapi.internals import connexion as connexion_internals
from shopapi.pipeline.request_facts import operation_of, revalidates
from shopapi.web import remembered_lists
from shopapi.web.representations import version_of


class RevalidationMiddleware:
    def __init__(self, app: ASGIApp):
        self.app = app
        self.remembered = remembered_lists.RememberedLists()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        operation = operation_of(scope) if scope["type"] == "http" else None
        token_info = connexion_internals.token_info(scope) if operation is not None else None
        if not (token_info and operation.list_of and revalidates(scope, operation)):
            await self.app(scope, receive, send)
            return
        condition = _header(scope, b"if-none-match")
        request = _request_of(scope, operation.id, Principal.of(token_info))
        known = self.remembered.get(request)
        # The tag exactly as the handler gave it: validation has not read this header yet.
        if known is not None and condition.strip(" \t") == known.tag:
            versions = await off_loop.run(_versions_of, known.tables)
            if versions is not None and remembered_lists.digest_of(versions) == known.versions:
                await send(
                    {
                        "type": "http.response.start",
                        "status": 304,
                        "headers": [(b"etag", known.tag.encode())],
                    }
                )
                await send({"type": "http.response.body", "body": b""})
                return
        noting = remembered_lists.current.set((self.remembered, request))
        try:
            await self.app(scope, receive, send)
        finally:
            remembered_lists.current.reset(noting)


def _header(scope: Scope, name: bytes) -> str | None:
    values = [value for key, value in scope["headers"] if key == name]
    return ",".join(value.decode("latin-1") for value in values) if values else None


def _request_of(scope: Scope, operation_id: str, principal: Principal) -> bytes:
    """A digest of everything a list's page and tag are made from besides the database: the
    operation and the version it is answered in, the path and query string, `Prefer`, and the
    caller as its handler sees it (subject, user, scopes)."""
    parts = (
        operation_id,
        str(version_of(scope)),
        scope["path"],
        scope["query_string"].decode("latin-1"),
        _header(scope, b"prefer") or "",
        principal.subject,
        str(principal.user_id),
        " ".join(sorted(principal.scopes)),
    )
    request = hashlib.blake2b(digest_size=16)
    for part in parts:
        encoded = part.encode("utf-8", "surrogateescape")
        request.update(len(encoded).to_bytes(8, "big") + encoded)
    return request.digest()


def _versions_of(tables: frozenset[str]) -> str | None:
    """The tables' versions, read where the request's reads go (its route); None when the
    database fails, and the handler then answers as it would."""
    try:
        with database.connection_context():
            return table_versions.versions_of(tables)
    except (peewee.DatabaseError, peewee.InterfaceError):
        return None
