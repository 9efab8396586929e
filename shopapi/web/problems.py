"""Every error as an RFC 9457 `application/problem+json` document carrying the request's id, from
whichever layer raised it. What becomes what: docs/web.md."""

import http
import json
import logging
import re
from collections.abc import Callable

import peewee
from asgi_correlation_id import correlation_id
from connexion.exceptions import OAuthScopeProblem, ProblemException
from connexion.lifecycle import ConnexionRequest, ConnexionResponse
from playhouse.pool import MaxConnectionsExceeded
from starlette.exceptions import HTTPException

from models import database_errors
from models.errors import Conflict, CurrentPasswordRequired, InvalidReference
from shopapi.auth.oauth import OAuthError
from shopapi.auth.security import NO_CREDENTIALS, challenge, presented_credentials

log = logging.getLogger("shopapi.errors")

# Seconds a client should wait before retrying while the database is unavailable; after its
# request ran out of time waiting for a lock or a statement (the partitioned host whose
# transaction held the lock is ended within DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS);
# after it lost to a concurrent transaction (a deadlock: run again, it goes through).
DATABASE_RETRY_AFTER = 5
TIMED_OUT_RETRY_AFTER = 2
CONFLICTED_RETRY_AFTER = 1


class ValidationProblem(ProblemException):
    """A 400 that lists each bad parameter or body field in `errors`."""

    def __init__(self, errors: list[dict], detail: str | None = None):
        super().__init__(
            status=400,
            title="Bad Request",
            detail=detail or "; ".join(_describe(error) for error in errors),
            ext={"errors": errors},
        )


def _describe(error: dict) -> str:
    where = error.get("parameter") or error.get("pointer") or "body"
    return f"{where}: {error['detail']}"


def problem_body(
    status: int,
    detail: str | None,
    *,
    instance: str,
    request_id: str | None,
    title: str | None = None,
    type: str | None = None,
    extensions: dict | None = None,
) -> str:
    """An RFC 9457 problem document."""
    phrase = http.HTTPStatus(status).phrase
    body = {
        "type": type or "about:blank",
        "title": title or phrase,
        "status": status,
        "detail": detail or phrase,
        "instance": instance,
        "request_id": request_id,
        **(extensions or {}),
    }
    # ASCII escapes keep any odd character a client sent (lone surrogates included) encodable.
    return json.dumps(body, ensure_ascii=True)


def problem(
    request: ConnexionRequest,
    status: int,
    detail: str | None = None,
    *,
    title: str | None = None,
    type: str | None = None,
    headers: dict | None = None,
    extensions: dict | None = None,
) -> ConnexionResponse:
    body = problem_body(
        status,
        detail,
        instance=request.url.path,
        request_id=correlation_id.get(),
        title=title,
        type=type,
        extensions=extensions,
    )
    return ConnexionResponse(
        status_code=status,
        mimetype="application/problem+json",
        content_type="application/problem+json",
        body=body,
        headers=headers or {},
    )


def _from_problem_exception(request, exc: ProblemException):
    headers = dict(exc.headers or {})
    detail = exc.detail
    if exc.status == 401:
        detail = detail if presented_credentials(request) else NO_CREDENTIALS
        headers["WWW-Authenticate"] = challenge(request, 401, detail)
    return problem(
        request,
        exc.status,
        detail,
        title=exc.title,
        type=exc.type,
        headers=headers,
        extensions=exc.ext,
    )


def _from_http_exception_with(allowed_methods):
    def _from_http_exception(request, exc: HTTPException):
        headers = dict(exc.headers or {})
        detail = exc.detail
        if exc.status_code == 405:
            headers["Allow"] = allowed_methods.header_for(request.url.path) or headers["Allow"]
        if isinstance(exc, OAuthScopeProblem):
            headers["WWW-Authenticate"] = challenge(request, 403, detail, exc.required_scopes)
            detail = f"These credentials lack the scope {' '.join(exc.required_scopes)}."
        return problem(request, exc.status_code, detail, headers=headers)

    return _from_http_exception


def _oauth_error(request, exc: OAuthError):
    body, status, headers = exc.answer()
    return ConnexionResponse(
        status_code=status,
        mimetype="application/json",
        content_type="application/json",
        body=json.dumps(body),
        headers=headers,
    )


def _not_found(request, exc: peewee.DoesNotExist):
    thing = type(exc).__name__.removesuffix("DoesNotExist").lower() or "resource"
    return problem(request, 404, f"There is no {thing} with this id.")


def _conflict(request, exc: Conflict):
    return problem(request, 409, str(exc))


def _current_password_required(request, exc: CurrentPasswordRequired):
    detail = f"To change your own password or email, send current_password: it {exc.why}."
    errors = [{"pointer": "/current_password", "detail": exc.why}]
    return problem(request, 403, detail, extensions={"errors": errors})


def _invalid_reference(request, exc: InvalidReference):
    errors = [{"pointer": exc.pointer, "detail": exc.detail}]
    return problem(request, 422, exc.detail, extensions={"errors": errors})


def _integrity_error(request, exc: peewee.IntegrityError):
    # Reached only when a constraint catches what the handler could not check first without a
    # race: a unique value taken by a concurrent request, a row referenced meanwhile.
    message = str(exc)
    if "UNIQUE" in message or "duplicate key" in message:
        # SQLite says "UNIQUE constraint failed: product.sku", PostgreSQL "Key (sku)=(...)".
        field = re.search(r"Key \((\w+)\)|failed: \w+\.(\w+)", message)
        name = next((g for g in field.groups() if g), None) if field else None
        detail = (
            f"Another resource already has this {name}."
            if name
            else ("Another resource already has this unique value.")
        )
        return problem(request, 409, detail)
    return problem(request, 409, "The change conflicts with related resources.")


def _data_error(request, exc: peewee.DataError):
    return problem(request, 400, "A value is out of the range the database can store.")


def _database_error(request, exc: peewee.OperationalError):
    """A statement or lock wait out of time (503), a transaction lost to a concurrent one (409),
    or the database away (503). Each rolled the request's work back, and each says when to
    retry: the idempotency layer keeps no answer that does (shopapi/pipeline/idempotency.py)."""
    if database_errors.conflicted(exc):
        log.warning("transaction lost to a concurrent one: %s", exc)
        return problem(
            request,
            409,
            "This request conflicted with a concurrent one and changed nothing; send it again.",
            headers={"Retry-After": str(CONFLICTED_RETRY_AFTER)},
        )
    if database_errors.timed_out(exc):
        log.warning("database work out of time: %s", exc)
        return problem(
            request,
            503,
            "The database did not finish this request in time (a row it changes is held by "
            "another, or a statement ran too long); nothing was changed; try again shortly.",
            headers={"Retry-After": str(TIMED_OUT_RETRY_AFTER)},
        )
    return _database_unavailable(request, exc)


def _database_unavailable(request, exc: Exception):
    log.warning("database unavailable: %s", exc)
    return problem(
        request,
        503,
        "The database is unavailable; try again shortly.",
        headers={"Retry-After": str(DATABASE_RETRY_AFTER)},
    )


def _unicode_error(request, exc: UnicodeDecodeError):
    return problem(request, 400, "The request is not valid UTF-8.")


def _unexpected(request, exc: Exception):
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return problem(request, 500, "An unexpected error occurred; it has been logged.")


def handlers(allowed_methods) -> dict[type[Exception], Callable]:
    """Each exception class and the handler that turns it into a problem response, for an app
    whose paths allow these methods (`allowed_methods.header_for(path)`: the contract's
    AllowedMethods, given by app.py)."""
    return {
        ProblemException: _from_problem_exception,
        OAuthError: _oauth_error,
        HTTPException: _from_http_exception_with(allowed_methods),
        peewee.DoesNotExist: _not_found,
        Conflict: _conflict,
        CurrentPasswordRequired: _current_password_required,
        InvalidReference: _invalid_reference,
        peewee.IntegrityError: _integrity_error,
        peewee.DataError: _data_error,
        peewee.OperationalError: _database_error,
        MaxConnectionsExceeded: _database_unavailable,
        peewee.InterfaceError: _database_unavailable,
        UnicodeDecodeError: _unicode_error,
        Exception: _unexpected,
    }


def register(app, allowed_methods) -> None:
    """Install the problem handlers on a Connexion app whose paths allow these methods."""
    for exception, handler in handlers(allowed_methods).items():
        app.add_error_handler(exception, _on_the_event_loop(handler))


def _on_the_event_loop(handler: Callable) -> Callable:
    """`handler` as a coroutine function. Connexion runs a plain function in a worker thread
    (anyio's pool), a hand-off that cost a shed request (pipeline/admission.py) more than all of
    its layers; a problem is made in microseconds, without I/O, so it is made on the loop."""

    async def render(request: ConnexionRequest, exc: Exception) -> ConnexionResponse:
        return handler(request, exc)

    return render
