"""The bridge from Connexion's ASGI middleware to Flask, in a2wsgi's place: Flask runs on as many
threads as the database pool has connections, and each response comes back to the event loop in
one hand-off. Design: docs/pipeline.md."""

import asyncio
import contextvars
from concurrent.futures import ThreadPoolExecutor

from starlette.types import Receive, Scope, Send

from shopapi.internals.a2wsgi import wsgi_environ
from shopapi.pipeline.buffered_body import read_body


class WSGIBridge:
    """An ASGI app running `app` (a WSGI app) on `threads` threads."""

    def __init__(self, app, threads: int):
        self.app = app  # the name Connexion's add_wsgi_middleware wraps
        self.executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="flask")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # Connexion answers lifespan and websockets before this
            return
        body = await read_body(receive)
        environ = wsgi_environ(scope, body)
        # Connexion's request context (the operation, the token's claims) lives in context
        # variables, which the thread must see.
        run = contextvars.copy_context().run
        loop = asyncio.get_running_loop()
        status, headers, content = await loop.run_in_executor(
            self.executor, run, self._run, environ
        )
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})

    def _run(self, environ: dict) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        started: list = []
        chunks: list[bytes] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info=None):
            # Nothing is sent before the app returns, so a later call (an error page, with
            # exc_info) simply replaces the status and headers, as PEP 3333 allows.
            started[:] = [
                int(status.split(" ", 1)[0]),
                [
                    (name.lower().encode("latin-1"), value.encode("latin-1"))
                    for name, value in headers
                ],
            ]
            return chunks.append  # WSGI's write() callable

        iterable = self.app(environ, start_response)
        try:
            chunks.extend(iterable)
        finally:
            if hasattr(iterable, "close"):
                iterable.close()
        status, headers = started
        return status, headers, b"".join(chunks)
