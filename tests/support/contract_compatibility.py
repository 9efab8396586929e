"""Does a new version of the v1 contract still serve every client written against an old one?

`breaking_changes(old, new)` lists what a v1 client relies on that `new` removes or narrows:
an operation, a parameter, a request media type or field it may send, a value it may send (a
removed enum value, a tighter bound, a new pattern), a new required input; a success status, a
response media type, a field it reads, or a field it can count on being there. Additions — new
paths, optional parameters, response fields, wider bounds — are not breaking.

The committed snapshots, tests/contracts/v1.json, v2.json and v3.json, are each version's
contract as served (bundled, the list language expanded). After an intended, compatible change,
refresh them with `python tests/support/contract_compatibility.py --write`
(`make contract-snapshot`).
"""

import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # run as a script too

from shopapi.contract import spec_files  # noqa: E402
from shopapi.contract.list_language import with_list_language  # noqa: E402
from shopapi.contract.spec_files import SPEC_FILES  # noqa: E402
from support.contract_walk import Resolver  # noqa: E402

SPEC_DIR = ROOT / "spec"
SNAPSHOT = ROOT / "tests" / "contracts" / "v1.json"
METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
# Keywords that, made smaller (max*) or larger (min*), refuse values that were accepted.
UPPER_BOUNDS = ("maximum", "maxLength", "maxItems", "maxProperties")
LOWER_BOUNDS = ("minimum", "minLength", "minItems", "minProperties")


# `(?:a|b|c)`: the field names of the list language's `sort` and `fields` patterns, dotted
# ones (v2's `total\.amount`) included.
_ALTERNATION = re.compile(r"\(\?:((?:[\w|]|\\\.)+)\)")


def _pattern_narrowed(old: str | None, new: str | None) -> bool:
    """Whether `new` may refuse what `old` accepted. Patterns cannot be compared in general;
    one that only adds alternatives (a new sortable field) is recognised as wider, any other
    change counts as narrowing."""
    if new is None or new == old:
        return False
    if old is None:
        return True
    old_groups, new_groups = _ALTERNATION.findall(old), _ALTERNATION.findall(new)
    return not (
        _ALTERNATION.sub("", old) == _ALTERNATION.sub("", new)
        and len(old_groups) == len(new_groups)
        and all(
            set(o.split("|")) <= set(n.split("|"))
            for o, n in zip(old_groups, new_groups, strict=True)
        )
    )


def _operations(spec: dict) -> dict:
    """Each operation, with the parameters its path item declares for all its operations."""
    return {
        (method.upper(), path): {
            **operation,
            "parameters": [*item.get("parameters", []), *operation.get("parameters", [])],
        }
        for path, item in spec["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    }


def _parameters(operation: dict, resolve) -> dict:
    return {(p["in"], p["name"]): p for p in map(resolve, operation.get("parameters", []))}


def _narrowed_input(where: str, old: dict, new: dict, sides) -> list[str]:
    """What a client may send under `old` that `new` refuses."""
    old, new = sides.old(old), sides.new(new)
    problems = []
    if old.get("type") != new.get("type") and new.get("type") is not None:
        problems.append(f"{where}: type {old.get('type')} became {new.get('type')}")
    if "enum" in new and set(old.get("enum", new["enum"])) - set(new["enum"]):
        removed = sorted(map(str, set(old.get("enum", [])) - set(new["enum"])))
        problems.append(f"{where}: values {', '.join(removed)} no longer accepted")
    if "enum" in new and "enum" not in old:
        problems.append(f"{where}: now limited to {new['enum']}")
    for key in UPPER_BOUNDS:
        if key in new and new[key] < old.get(key, float("inf")):
            problems.append(f"{where}: {key} lowered to {new[key]}")
    for key in LOWER_BOUNDS:
        if key in new and new[key] > old.get(key, float("-inf")):
            problems.append(f"{where}: {key} raised to {new[key]}")
    if _pattern_narrowed(old.get("pattern"), new.get("pattern")):
        problems.append(f"{where}: pattern changed to {new['pattern']!r}")
    if old.get("nullable") and not new.get("nullable"):
        problems.append(f"{where}: null no longer accepted")
    old_properties, new_properties = old.get("properties", {}), new.get("properties", {})
    for name, schema in old_properties.items():
        if sides.old(schema).get("readOnly"):
            continue  # never sent (an answer's field, a v3 order item's expanded product)
        if name not in new_properties:
            if new.get("additionalProperties") is False:
                problems.append(f"{where}.{name}: no longer accepted")
            continue
        if sides.new(new_properties[name]).get("readOnly"):
            problems.append(f"{where}.{name}: now read-only")
            continue
        problems += _narrowed_input(f"{where}.{name}", schema, new_properties[name], sides)
    for name in set(new.get("required", [])) - set(old.get("required", [])):
        problems.append(f"{where}.{name}: now required")
    if "items" in old and "items" in new:
        problems += _narrowed_input(f"{where}[]", old["items"], new["items"], sides)
    return problems


def _narrowed_output(where: str, old: dict, new: dict, sides) -> list[str]:
    """What a client reading `old` relies on that `new` no longer gives."""
    old, new = sides.old(old), sides.new(new)
    problems = []
    if old.get("type") != new.get("type") and old.get("type") is not None:
        problems.append(f"{where}: type {old.get('type')} became {new.get('type')}")
    if not old.get("nullable") and new.get("nullable"):
        problems.append(f"{where}: may now be null")
    old_properties, new_properties = old.get("properties", {}), new.get("properties", {})
    for name, schema in old_properties.items():
        if sides.old(schema).get("writeOnly"):
            continue  # never answered (a password)
        if name not in new_properties:
            problems.append(f"{where}.{name}: removed")
            continue
        problems += _narrowed_output(f"{where}.{name}", schema, new_properties[name], sides)
    for name in set(old.get("required", [])) - set(new.get("required", [])):
        problems.append(f"{where}.{name}: no longer always present")
    if "items" in old and "items" in new:
        problems += _narrowed_output(f"{where}[]", old["items"], new["items"], sides)
    return problems


class _Sides:
    """Each side's schemas resolved in its own spec: a component changed between the two must
    be compared, not looked up twice in the new one."""

    def __init__(self, old: dict, new: dict):
        self.old, self.new = Resolver(old), Resolver(new)


def breaking_changes(old: dict, new: dict) -> list[str]:
    sides = _Sides(old, new)
    new_operations = _operations(new)
    problems = []
    for key, old_op in _operations(old).items():
        name = " ".join(key)
        if key not in new_operations:
            problems.append(f"{name}: removed")
            continue
        new_op = new_operations[key]
        problems += _parameter_changes(name, old_op, new_op, sides)
        problems += _request_body_changes(name, old_op, new_op, sides)
        problems += _response_changes(name, old_op, new_op, sides)
    return problems


def _parameter_changes(name: str, old_op: dict, new_op: dict, sides) -> list[str]:
    old_params, new_params = _parameters(old_op, sides.old), _parameters(new_op, sides.new)
    problems = []
    for key, old_param in old_params.items():
        where = f"{name} {key[0]} parameter {key[1]}"
        if key not in new_params:
            problems.append(f"{where}: removed")
            continue
        new_param = new_params[key]
        if new_param.get("required") and not old_param.get("required"):
            problems.append(f"{where}: now required")
        problems += _narrowed_input(
            where, old_param.get("schema", {}), new_param.get("schema", {}), sides
        )
    for key, new_param in new_params.items():
        if key not in old_params and new_param.get("required"):
            problems.append(f"{name} {key[0]} parameter {key[1]}: new and required")
    return problems


def _request_body_changes(name: str, old_op: dict, new_op: dict, sides) -> list[str]:
    if "requestBody" not in old_op:
        if sides.new(new_op.get("requestBody", {})).get("required"):
            return [f"{name}: now requires a body"]
        return []
    old_content = sides.old(old_op["requestBody"]).get("content", {})
    new_content = sides.new(new_op.get("requestBody", {})).get("content", {})
    problems = []
    for media_type, content in old_content.items():
        if media_type not in new_content:
            problems.append(f"{name}: request body {media_type} no longer accepted")
            continue
        problems += _narrowed_input(
            f"{name} body",
            content.get("schema", {}),
            new_content[media_type].get("schema", {}),
            sides,
        )
    return problems


def _response_changes(name: str, old_op: dict, new_op: dict, sides) -> list[str]:
    new_responses = new_op.get("responses", {})
    problems = []
    for status, old_response in old_op.get("responses", {}).items():
        if not str(status).startswith("2"):
            continue
        if status not in new_responses:
            problems.append(f"{name}: response {status} removed")
            continue
        old_content = sides.old(old_response).get("content", {})
        new_content = sides.new(new_responses[status]).get("content", {})
        for media_type, content in old_content.items():
            if media_type not in new_content:
                problems.append(f"{name}: response {status} {media_type} no longer produced")
                continue
            problems += _narrowed_output(
                f"{name} {status}",
                content.get("schema", {}),
                new_content[media_type].get("schema", {}),
                sides,
            )
    return problems


def snapshot_of(version: int) -> pathlib.Path:
    return SNAPSHOT.with_name(f"v{version}.json")


def served_contract(version: int, spec_dir: pathlib.Path = SPEC_DIR) -> dict:
    """Version `version`'s contract as clients see it: its spec file in `spec_dir` bundled by
    the app's own bundler (each version takes the shared components of components.yaml, v2 and
    v3 parts of others), the list language expanded."""
    return with_list_language(spec_files.load(spec_dir / SPEC_FILES[version]))


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(f"usage: {sys.argv[0]} --write   (refresh {SNAPSHOT.parent}/v*.json)")
    SNAPSHOT.parent.mkdir(exist_ok=True)
    for version in SPEC_FILES:
        snapshot = snapshot_of(version)
        snapshot.write_text(json.dumps(served_contract(version), indent=1, sort_keys=True) + "\n")
        print(f"wrote {snapshot}")
