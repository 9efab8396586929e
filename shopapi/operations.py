"""The operations a spec declares, each with what the cross-cutting layers need to know about it:
its route template (for logs), its rate limit, whether it accepts an Idempotency-Key."""

import dataclasses
from collections.abc import Iterator

HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


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
                    accepts_idempotency_key=_declares_idempotency_key(spec, item, operation),
                )


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
        self._by_handler = {op.handler: op for spec in specs for op in operations_of(spec)}

    def __iter__(self) -> Iterator[Operation]:
        return iter(self._by_handler.values())

    def of(self, scope) -> Operation | None:
        """The operation Connexion's router matched for this request, if any."""
        routing = scope.get("extensions", {}).get("connexion_routing", {})
        return self._by_handler.get(routing.get("operation_id"))
