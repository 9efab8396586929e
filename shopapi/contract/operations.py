"""The operations a spec declares, each with what the cross-cutting layers need to know about it:
its route template (for logs), its rate limit (and its limits on failed attempts per account),
its deprecation, whether it accepts an Idempotency-Key and the media types of the body it takes."""

import dataclasses
import datetime
import re
from collections.abc import Iterator

HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
# The operation extensions that limit failed attempts of one kind per account (or per account
# and address) in one or more windows (shopapi/pipeline/attempt_limits.py); the kind is the name
# after the prefix.
ATTEMPT_LIMIT_PREFIX = "x-rate-limit-"
ATTEMPT_LIMITS = (
    "failed-login-per-account-and-address",
    "failed-login-per-account",
    "email-taken-per-user",
)


@dataclasses.dataclass(frozen=True)
class Operation:
    id: str
    # The name Connexion's router gives it: the handler's dotted path.
    handler: str
    method: str
    # The path template under the API's base path, as clients see it: /v1/users/{user_id}
    route: str
    # `x-rate-limit` of the operation, else of the spec ("1000/minute"), else None.
    rate_limit: str | None
    # Whether the operation declares the `Idempotency-Key` header parameter.
    accepts_idempotency_key: bool
    # The API's base path (/v1), as Connexion's router notes it.
    base_path: str = ""
    # For a `deprecated` operation: since when, until when, and what replaces it.
    deprecation: "Deprecation | None" = None
    # The media types of the request body it takes; none when it takes no body.
    media_types: tuple[str, ...] = ()
    # `x-rate-limit-failed-login-per-account: 10/15 minutes; 50/day` and the others of
    # ATTEMPT_LIMITS it declares: each kind with its limits, one per window.
    attempt_limits: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class Deprecation:
    # `x-deprecated-at` and `x-sunset`, dates.
    since: datetime.date
    sunset: datetime.date | None
    # `x-successor`: a URI reference relative to the API's base path, in which `{name}` stands
    # for the request's path parameter of that name.
    successor: str | None


def _deprecation(operation: dict) -> Deprecation | None:
    if not operation.get("deprecated"):
        return None
    return Deprecation(
        since=_date(operation["x-deprecated-at"]),
        sunset=_date(operation.get("x-sunset")),
        successor=operation.get("x-successor"),
    )


def _date(value) -> datetime.date | None:
    # YAML reads an unquoted 2027-06-30 as a date already.
    return datetime.date.fromisoformat(str(value)) if value else None


def route_pattern(route: str) -> re.Pattern:
    """A regex that matches the paths of a route template (`/v1/users/{id}`), each path
    parameter a named group."""
    return re.compile(re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(route)))


def operations_of(spec: dict) -> Iterator[Operation]:
    base = spec.get("servers", [{}])[0].get("url", "").rstrip("/")
    default_limit = spec.get("x-rate-limit")
    for template, item in spec["paths"].items():
        for method, operation in item.items():
            if method in HTTP_METHODS:
                controller = operation.get("x-openapi-router-controller")
                yield Operation(
                    id=operation["operationId"],
                    handler=".".join(filter(None, (controller, operation["operationId"]))),
                    method=method.upper(),
                    route=base + template,
                    rate_limit=operation.get("x-rate-limit", default_limit),
                    base_path=base,
                    deprecation=_deprecation(operation),
                    accepts_idempotency_key=_declares_idempotency_key(spec, item, operation),
                    media_types=tuple(_request_body(spec, operation).get("content", {})),
                    attempt_limits=tuple(
                        (kind, operation[ATTEMPT_LIMIT_PREFIX + kind])
                        for kind in ATTEMPT_LIMITS
                        if ATTEMPT_LIMIT_PREFIX + kind in operation
                    ),
                )


def _request_body(spec: dict, operation: dict) -> dict:
    body = operation.get("requestBody", {})
    if "$ref" in body:  # '#/components/requestBodies/...'
        body = spec["components"]["requestBodies"][body["$ref"].rsplit("/", 1)[1]]
    return body


def _declares_idempotency_key(spec: dict, item: dict, operation: dict) -> bool:
    for parameter in [*item.get("parameters", []), *operation.get("parameters", [])]:
        if "$ref" in parameter:  # '#/components/parameters/IdempotencyKey'
            parameter = spec["components"]["parameters"][parameter["$ref"].rsplit("/", 1)[1]]
        if parameter["in"] == "header" and parameter["name"].lower() == "idempotency-key":
            return True
    return False


class Operations:
    """The operations of several specs, found from a request once Connexion has routed it."""

    def __init__(self, specs: list[dict]):
        # Versions share handlers: an operation is its API's base path and its handler.
        self._by_handler = {
            (op.base_path, op.handler): op for spec in specs for op in operations_of(spec)
        }

    def __iter__(self) -> Iterator[Operation]:
        return iter(self._by_handler.values())

    def get(self, base_path: str | None, handler: str | None) -> Operation | None:
        """The operation of this API (`/v1`) that this handler (Connexion's router names it by
        its dotted path) answers, if any."""
        return self._by_handler.get((base_path, handler))
