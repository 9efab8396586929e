"""The operations of the contracts as served (`/v1/openapi.json`, `/v2/openapi.json`), their
parameters and request bodies resolved: for tests that hold a rule to every operation, parameter
or field a contract has, so that one added later is held to it too."""

import dataclasses
import re

VERSIONS = (1, 2)
METHODS = ("get", "put", "post", "delete", "patch")


def follow_ref(contract: dict, node: dict) -> dict:
    """`node` of a contract with its internal `$ref`s followed."""
    while isinstance(node, dict) and "$ref" in node:
        target = contract
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part.replace("~1", "/").replace("~0", "~")]
        node = target
    return node


class Resolver:
    """Follows a contract's local `$ref`s and merges `allOf` (properties, required)."""

    def __init__(self, document: dict):
        self.document = document

    def __call__(self, node):
        node = follow_ref(self.document, node)
        if isinstance(node, dict) and "allOf" in node:
            merged = {k: v for k, v in node.items() if k != "allOf"}
            for part in map(self, node["allOf"]):
                for key, value in part.items():
                    if key == "properties":
                        merged["properties"] = {**merged.get("properties", {}), **value}
                    elif key == "required":
                        merged["required"] = sorted({*merged.get("required", []), *value})
                    else:
                        merged.setdefault(key, value)
            node = merged
        return node


@dataclasses.dataclass
class Operation:
    version: int
    method: str  # upper case
    template: str  # /v1/users/{id}
    id: str
    parameters: list[dict]  # resolved, each with its schema resolved
    bodies: dict[str, dict]  # media type: the body's schema, resolved at the top
    resolve: Resolver
    streams: bool = False  # answers with a stream that does not end (text/event-stream)

    def url(self, **values) -> str:
        """The path with each path parameter filled in (1 unless given)."""
        return re.sub(r"\{(\w+)\}", lambda m: str(values.get(m[1], 1)), self.template)

    def query_parameters(self) -> list[dict]:
        return [p for p in self.parameters if p["in"] == "query"]

    def __str__(self) -> str:
        return f"{self.method} {self.template}"


def operations(client, versions=VERSIONS) -> list[Operation]:
    """Every operation of the served contracts of `versions`, read through `client`."""
    found = []
    for version in versions:
        document = client.get(f"/v{version}/openapi.json").json()
        resolve = Resolver(document)
        base = document["servers"][0]["url"].rstrip("/")
        for path, item in document["paths"].items():
            item = resolve(item)
            shared = [resolve(p) for p in item.get("parameters", [])]
            for method in METHODS:
                if method not in item:
                    continue
                operation = item[method]
                parameters = {(p["in"], p["name"]): p for p in shared}
                parameters.update(
                    {(p["in"], p["name"]): p for p in map(resolve, operation.get("parameters", []))}
                )
                for parameter in parameters.values():
                    parameter["schema"] = resolve(parameter.get("schema", {}))
                content = resolve(operation.get("requestBody", {})).get("content", {})
                found.append(
                    Operation(
                        version=version,
                        method=method.upper(),
                        template=base + path,
                        id=operation["operationId"],
                        parameters=list(parameters.values()),
                        bodies={t: resolve(c.get("schema", {})) for t, c in content.items()},
                        resolve=resolve,
                        streams=any(
                            "text/event-stream" in resolve(answer).get("content", {})
                            for answer in operation["responses"].values()
                        ),
                    )
                )
    return found


def pointers_of_format(schema: dict, resolve: Resolver, fmt: str, path: str = "") -> list[str]:
    """JSON pointers to every place in documents of `schema` that holds a string of format
    `fmt` a client may send (not read-only; an array's items as `/0`)."""
    schema = resolve(schema)
    if schema.get("readOnly"):
        return []
    found = [path] if schema.get("format") == fmt else []
    for name, inner in schema.get("properties", {}).items():
        found += pointers_of_format(inner, resolve, fmt, f"{path}/{name}")
    if "items" in schema:
        found += pointers_of_format(schema["items"], resolve, fmt, f"{path}/0")
    return found


def patterns(node) -> set[str]:
    """Every `pattern` in `node` (a contract, or any part of one)."""
    if isinstance(node, dict):
        found = {node["pattern"]} if isinstance(node.get("pattern"), str) else set()
        return found.union(*map(patterns, node.values()))
    if isinstance(node, list):
        return set().union(*map(patterns, node))
    return set()
