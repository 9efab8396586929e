"""The one reading of the contract: the operations a spec declares, each with what the rest of
the service needs to know about it (its route, base path, rate limits, deprecation, header
parameters, the headers of its success, the media types of the body it takes, whether a
balancer polls it). Only this module walks a spec's paths and components, follows its `$ref`s
and works out its base path (tests/test_contract_reading.py holds it); a new `x-` extension is
read here, into a field of Operation. How: docs/contract.md."""

import dataclasses
import datetime
import functools
import re
from collections.abc import Iterator

HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
# The operation extensions that limit failed attempts of one kind per account (or per account
# and address) in one or more windows (shopapi/pipeline/account_limits.py); the kind is the name
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
    # The path template under the base path, as the spec writes it: /users/{user_id}
    template: str = ""
    # The header parameters it declares (its path item's and its own), lower-cased: what its
    # conditional requests are (If-Match, If-None-Match: shopapi/web/etags.py).
    header_parameters: frozenset[str] = frozenset()
    # The headers its 200 answer declares, lower-cased (`etag` when it is tagged).
    success_headers: frozenset[str] = frozenset()
    # `x-list-of`: the resource a list operation lists (its filters: list_language.py).
    list_of: str | None = None
    # `x-probe`: a balancer polls it (logged and counted apart: pipeline/observability.py).
    probe: bool = False
    # Whether a busy server may refuse it with a 503 (pipeline/admission.py): it declares one,
    # and no balancer polls it.
    sheddable: bool = False


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


def base_path_of(spec: dict) -> str:
    """The API's base path (`/v1`): its first server's URL without a trailing slash. A spec that
    names no server is served at `/` (OpenAPI 3.0.3, 4.7.1), whose base path is ``."""
    return spec.get("servers", [{"url": "/"}])[0]["url"].rstrip("/")


def resolved(node: dict, spec: dict) -> dict:
    """`node` with its `$ref` followed within `spec` (`#/components/parameters/IdempotencyKey`),
    and the `$ref` of what it refers to, until a node that is no reference. The contract's
    only follower of references: spec_files.py has bundled every file's into local ones."""
    while "$ref" in node:
        path = node["$ref"].removeprefix("#/").split("/")
        node = functools.reduce(lambda parent, key: parent[key], path, spec)
    return node


def merged(schema: dict, spec: dict) -> dict:
    """`schema` with its `$ref` followed and its `allOf` merged into one (each part's keywords,
    then its own)."""
    schema = resolved(schema, spec)
    if "allOf" not in schema:
        return schema
    whole = {}
    for part in schema["allOf"]:
        whole.update(merged(part, spec))
    whole.update({k: v for k, v in schema.items() if k != "allOf"})
    return whole


def components(spec: dict, kind: str) -> dict:
    """The components of this kind (`schemas`, `parameters`), made if the spec has none yet: for
    the start-up steps that write into the contract (list_language.py)."""
    return spec.setdefault("components", {}).setdefault(kind, {})


def operation_objects(spec: dict) -> Iterator[tuple[str, str, dict, dict]]:
    """(path template, method, path item, operation object) of each operation the spec declares,
    as the spec has them: for the start-up steps that write into the contract."""
    for template, item in spec["paths"].items():
        for method, operation in item.items():
            if method in HTTP_METHODS:
                yield template, method, item, operation


def security_requirements(spec: dict) -> Iterator[list[dict]]:
    """Every list of security requirements the spec declares, its default's and each
    operation's own, as the spec has them: for auth/security.py's API key scopes."""
    if "security" in spec:
        yield spec["security"]
    for _, _, _, operation in operation_objects(spec):
        if "security" in operation:
            yield operation["security"]


def failed_auth_limit_of(spec: dict) -> str | None:
    """`x-rate-limit-failed-auth` of the spec: refused credentials per address (`20/minute`)."""
    return spec.get("x-rate-limit-failed-auth")


def operations_of(spec: dict) -> Iterator[Operation]:
    base = base_path_of(spec)
    default_limit = spec.get("x-rate-limit")
    for template, method, item, operation in operation_objects(spec):
        controller = operation.get("x-openapi-router-controller")
        header_parameters = _header_parameters(spec, item, operation)
        yield Operation(
            id=operation["operationId"],
            handler=".".join(filter(None, (controller, operation["operationId"]))),
            method=method.upper(),
            route=base + template,
            rate_limit=operation.get("x-rate-limit", default_limit),
            base_path=base,
            deprecation=_deprecation(operation),
            accepts_idempotency_key="idempotency-key" in header_parameters,
            media_types=tuple(resolved(operation.get("requestBody", {}), spec).get("content", {})),
            attempt_limits=tuple(
                (kind, operation[ATTEMPT_LIMIT_PREFIX + kind])
                for kind in ATTEMPT_LIMITS
                if ATTEMPT_LIMIT_PREFIX + kind in operation
            ),
            template=template,
            header_parameters=header_parameters,
            success_headers=frozenset(
                name.lower()
                for name in resolved(operation["responses"].get("200", {}), spec).get("headers", {})
            ),
            list_of=operation.get("x-list-of"),
            probe=bool(operation.get("x-probe")),
            sheddable="503" in operation["responses"] and not operation.get("x-probe"),
        )


def _header_parameters(spec: dict, item: dict, operation: dict) -> frozenset[str]:
    parameters = [*item.get("parameters", ()), *operation.get("parameters", ())]
    return frozenset(
        parameter["name"].lower()
        for parameter in (resolved(p, spec) for p in parameters)
        if parameter["in"] == "header"
    )


class Operations:
    """The operations of several specs, found from a request once Connexion has routed it."""

    def __init__(self, specs: list[dict]):
        self._all = [op for spec in specs for op in operations_of(spec)]
        # Versions share handlers: an operation is its API's base path and its handler.
        self._by_handler = {(op.base_path, op.handler): op for op in self._all}
        self._by_route = {(op.route, op.method): op for op in self._all}

    def __iter__(self) -> Iterator[Operation]:
        return iter(self._all)

    def at(self, route: str, method: str) -> Operation:
        """The operation of this route template (`/v1/users/{user_id}`) and method (`GET`)."""
        return self._by_route[(route, method.upper())]

    @property
    def probes(self) -> frozenset[str]:
        """The operationIds of the operations a balancer polls (`x-probe`)."""
        return frozenset(op.id for op in self._all if op.probe)

    def get(self, base_path: str | None, handler: str | None) -> Operation | None:
        """The operation of this API (`/v1`) that this handler (Connexion's router names it by
        its dotted path) answers, if any."""
        return self._by_handler.get((base_path, handler))
