"""`Idempotency-Key` on the operations whose spec declares the header: the first answer to a
client's key is committed with the change it reports, kept for 24 hours and replayed byte for
byte (`Idempotent-Replayed: true`) without running the handler again. Design: docs/pipeline.md."""

import contextlib
import contextvars
import dataclasses
import datetime
import hashlib
import hmac
import itertools
import json
import logging
from collections.abc import Callable, Mapping

import flask
import peewee
from connexion.exceptions import ProblemException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from models import IdempotencyKey, off_loop
from models.db import database
from models.routing import note_committed_write
from shopapi.internals.connexion import error_answering
from shopapi.pipeline.buffered_body import read_body, replay_body
from shopapi.pipeline.request_facts import caller_of, operation_of
from shopapi.web.problems import ValidationProblem

log = logging.getLogger("shopapi.idempotency")

HEADER = b"idempotency-key"
REPLAYED = (b"idempotent-replayed", b"true")
# How long a key and its answer are kept: long enough for any client's retries.
LIFETIME = datetime.timedelta(hours=24)
# A claim still unanswered after this long belongs to a worker that died: a retry of the same
# request runs it again. Far beyond any request's own timeouts (docs/pipeline.md). The default
# of IDEMPOTENCY_LEASE_SECONDS.
LEASE = datetime.timedelta(minutes=5)
# Seconds a retry of a request still running should wait: requests take milliseconds.
IN_FLIGHT_RETRY_AFTER = 1
# Every this many claims, a worker deletes up to PURGE_BATCH expired rows after its response has
# gone: no request waits for a large delete.
PURGE_EVERY = 100
PURGE_BATCH = 1000


class KeyReused(ProblemException):
    def __init__(self):
        detail = (
            "This Idempotency-Key was used for another request (another method, path or body); "
            "use a new key for a new request."
        )
        super().__init__(
            status=422,
            title="Unprocessable Content",
            detail=detail,
            ext={"errors": [{"parameter": "Idempotency-Key", "detail": detail}]},
        )


class KeyInFlight(ProblemException):
    def __init__(self):
        super().__init__(
            status=409,
            title="Conflict",
            detail=(
                "A request with this Idempotency-Key is still being processed; retry after "
                f"{IN_FLIGHT_RETRY_AFTER} second(s) to get its answer."
            ),
            headers={"Retry-After": str(IN_FLIGHT_RETRY_AFTER)},
        )


def fingerprint_key(secret: bytes) -> bytes:
    """The fingerprints' own key, derived so that it signs nothing else (cursors use `secret`)."""
    return hmac.new(secret, b"shopapi idempotency-key fingerprint", hashlib.sha256).digest()


def fingerprint(key: bytes, method: str, path: str, query: bytes, body: bytes) -> str:
    """HMAC-SHA256 of the request, each part length-prefixed so no two requests share one."""
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for part in (method.encode(), path.encode("utf-8", "surrogateescape"), query, body):
        mac.update(len(part).to_bytes(8, "big") + part)
    return mac.hexdigest()


async def _in_database(function: Callable, *args):
    """Run a Peewee call off the event loop, on a connection opened and closed around it."""

    def run():
        with database.connection_context():
            return function(*args)

    return await off_loop.run(run)


@dataclasses.dataclass
class Claim:
    """A request's hold on its key, which its Flask thread sees in `current_claim` (the thread
    runs in a copy of the request's context)."""

    client: str
    key: str
    token: str
    # The answer was committed in the request's transaction, with what the request changed.
    stored: bool = False
    # A retry took the key over (after the lease) before the answer could be stored: the
    # request's transaction was rolled back, and its answer is a 409.
    lost: bool = False


current_claim: contextvars.ContextVar[Claim | None] = contextvars.ContextVar(
    "idempotency_claim", default=None
)


class IdempotencyMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        secret: bytes,
        error_handlers: Mapping[type[Exception], Callable],
        lease: datetime.timedelta = LEASE,
    ):
        self.app = app
        self.lease = lease
        self.fingerprint_key = fingerprint_key(secret)
        self.answering = error_answering(app, error_handlers)
        self._claims = itertools.count(1)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        key = self._key_of(scope)
        if key is None:
            await self.app(scope, receive, send)
            return
        body = await read_body(receive)
        caller = caller_of(scope)
        request = fingerprint(
            self.fingerprint_key, scope["method"], scope["path"], scope["query_string"], body
        )
        token, held = await _in_database(
            IdempotencyKey.claim, caller, key, request, self.lease, LIFETIME
        )
        if token is None:
            if held.fingerprint != request:
                raise KeyReused()
            if not held.answered:
                raise KeyInFlight()
            await _in_database(note_committed_write, database.obj)
            await _replay(held, send)
            return
        claim = Claim(caller, key, token)
        claimed = current_claim.set(claim)
        try:
            start, body_messages = await self._answer(scope, replay_body(body, receive))
        except Exception:
            await self._release(claim)
            raise
        finally:
            current_claim.reset(claimed)
        if claim.stored or claim.lost:
            pass  # stored with the change, or the key is a retry's now
        elif start["status"] >= 500 or _asks_for_a_retry(start):
            # Nothing was done, and the client is told to send it again: the retry must run.
            await self._release(claim)
        else:
            # A refusal the handler raised: its transaction was rolled back, so there is no
            # change to store it with, and a crash before this store leaves nothing done.
            await self._store(claim, start, body_messages)
        await send(start)
        for message in body_messages:
            await send(message)
        if next(self._claims) % PURGE_EVERY == 0:
            await self._purge()

    def _key_of(self, scope: Scope) -> str | None:
        if scope["type"] != "http":
            return None
        operation = operation_of(scope)
        if operation is None or not operation.accepts_idempotency_key:
            return None
        keys = [value for name, value in scope["headers"] if name == HEADER]
        if len(keys) > 1:
            raise ValidationProblem(
                [{"parameter": "Idempotency-Key", "detail": "must be sent once, not repeated"}]
            )
        # Already checked against the spec (printable ASCII): decoding cannot fail.
        return keys[0].decode("ascii") if keys else None

    async def _answer(self, scope: Scope, receive: Receive) -> tuple[Message, list[Message]]:
        """The app's whole response, errors turned into their problem responses."""
        messages: list[Message] = []

        async def keep(message: Message) -> None:
            messages.append(message)

        # A copy of the scope: the exception middleware notes its handlers in it, and the
        # outer one, which reads that note, must keep its own.
        await self.answering(dict(scope), receive, keep)
        start, *rest = messages
        return start, [m for m in rest if m["type"] == "http.response.body"]

    async def _store(self, claim: Claim, start: Message, body_messages: list[Message]) -> None:
        headers = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in start["headers"]]
        body = b"".join(m.get("body", b"") for m in body_messages)
        try:
            stored = await _in_database(_store_answer, claim, start["status"], headers, body)
        except Exception as error:
            # The answer is still the client's to have; a retry finds the key in flight until
            # the lease ends.
            log.warning("could not store the answer to an idempotency key: %s", error)
            return
        if not stored:
            log.warning("an idempotency key was taken over before its answer was stored")

    async def _release(self, claim: Claim) -> None:
        try:
            await _in_database(IdempotencyKey.release, claim.client, claim.key, claim.token)
        except Exception as error:  # the answer goes out whatever happens to the key
            log.warning("could not release an idempotency key (its lease will): %s", error)

    async def _purge(self) -> None:
        try:
            await _in_database(IdempotencyKey.purge, LIFETIME, PURGE_BATCH)
        except Exception as error:  # the response has gone: there is no one to tell
            log.warning("could not purge expired idempotency keys: %s", error)


def _asks_for_a_retry(start: Message) -> bool:
    """An answer with Retry-After: a transaction lost to a concurrent one (409), a rate limit."""
    return any(name.lower() == b"retry-after" for name, _ in start["headers"])


async def _replay(held: IdempotencyKey, send: Send) -> None:
    headers = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in json.loads(held.headers)]
    await send(
        {"type": "http.response.start", "status": held.status, "headers": [*headers, REPLAYED]}
    )
    await send({"type": "http.response.body", "body": bytes(held.body)})


def _store_answer(claim: Claim, status: int, headers: list[tuple[str, str]], body: bytes) -> bool:
    """Store the answer under the claim; False when a retry took the key over meanwhile."""
    headers_json = json.dumps([[name, value] for name, value in headers])
    return IdempotencyKey.answer(claim.client, claim.key, claim.token, status, headers_json, body)


# Where a request holding a claim keeps its transaction between the Flask hooks below.
_TRANSACTION = "idempotency_transaction"


class _RolledBack(Exception):
    """What ends a request's transaction without committing it."""


class _RequestTransaction:
    """A transaction opened in one Flask hook and ended in another: no `with` block spans them."""

    def __init__(self):
        self._atomic = database.atomic()
        self._atomic.__enter__()

    def commit(self) -> None:
        """Commit; when that fails, roll back and raise."""
        self._atomic.__exit__(None, None, None)

    def roll_back(self) -> None:
        # On a failed connection the server ends the transaction without committing, and the
        # request's own error, not this one, is the client's answer.
        with contextlib.suppress(peewee.OperationalError, peewee.InterfaceError):
            self._atomic.__exit__(_RolledBack, _RolledBack(), None)


def commit_answers_with_changes(flask_app: flask.Flask) -> None:
    """Run each request that holds a claim in one transaction, which stores its answer before
    it commits: what the request changed and the answer a retry replays commit together, or
    neither does, whenever the host dies. The handlers' own transactions become savepoints in
    it. Flask runs hooks of a kind last registered first, so call it after the hook that hands
    the request's connection back (the transaction ends first) and before any other
    after-request hook (the answer stored is the final response)."""
    flask_app.before_request(_begin)
    flask_app.after_request(_commit_with_the_answer)
    flask_app.teardown_request(_roll_back)


def _begin() -> None:
    if current_claim.get() is not None:
        setattr(flask.g, _TRANSACTION, _RequestTransaction())


def _commit_with_the_answer(response: flask.Response) -> flask.Response:
    transaction = flask.g.pop(_TRANSACTION, None)
    if transaction is None:
        return response
    if response.status_code >= 500:
        # Not kept, and a retry runs the request again: nothing it did may stay.
        transaction.roll_back()
        return response
    claim = current_claim.get()
    try:
        # The status, headers and body as the WSGI bridge hands them on: what a replay sends.
        content, _, headers = response.get_wsgi_response(flask.request.environ)
        headers = [(name.lower(), value) for name, value in headers]
        if not _store_answer(claim, response.status_code, headers, b"".join(content)):
            claim.lost = True
            log.warning("a request outlived its idempotency key's lease: rolled back")
            raise KeyInFlight()
    except BaseException:
        transaction.roll_back()
        raise
    transaction.commit()
    claim.stored = True
    return response


def _roll_back(error: BaseException | None) -> None:
    """A request that raised before its answer was stored: nothing it did is kept."""
    transaction = flask.g.pop(_TRANSACTION, None)
    if transaction is not None:
        transaction.roll_back()
