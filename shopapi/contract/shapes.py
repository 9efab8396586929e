"""Each operation's shapes, built once from its version's contract: how its answers show what its
handler gives, how its body is read, and how the resource at its path is shown (an If-Match's
tag is of that); and how a version's events show their resources. How: docs/web.md."""

import dataclasses

from shopapi.contract import spec_files
from shopapi.contract.operations import merged, operation_objects, resolved
from shopapi.web.representations import (
    BY_KIND,
    COPY,
    EACH,
    MINOR_UNITS,
    MONEY,
    NESTED,
    Reading,
    Shape,
)

# A free-form object shown by the schema that a sibling's value names: an event's `data`, by its
# `resource_type` (spec/components.yaml's EventData): `{by: resource_type, schemas: {...}}`.
SHOWN_AS = "x-shown-as"
_JSON = "application/json"


@dataclasses.dataclass(frozen=True)
class OperationShapes:
    # The body's, when the operation takes a JSON object.
    reading: Reading | None = None
    # Each success status's answer (201: the resource created), when it needs shaping.
    answers: dict[int, Shape] = dataclasses.field(default_factory=dict)
    # The resource at the operation's path, as its GET shows it.
    resource: Shape | None = None
    # Whether it answers a list (`x-list-of`), and the fields that the list language's `fields`
    # keeps there (what `expand` brought).
    listed: bool = False
    kept: tuple[str, ...] = ()


def _is_money(schema: dict) -> bool:
    return set(schema.get("properties", ())) == {"amount", "currency"}


class _Built:
    """The shapes and readings of one spec, each schema's built once (by its `$ref`)."""

    def __init__(self, spec: dict):
        self.spec = spec
        self.shapes: dict = {}
        self.readings: dict = {}

    def _key(self, node: dict) -> int:
        # The node a reference leads to is the spec's own, the same wherever it is referred to.
        return id(resolved(node, self.spec))

    def shape(self, node: dict) -> Shape | None:
        """The Shape of an object schema; None where what a handler gives is shown as it is (an
        open object with nothing inside to shape, anything but an object)."""
        key = self._key(node)
        if key not in self.shapes:
            self.shapes[key] = None  # a schema inside itself is shown as it is there
            self.shapes[key] = self._shape(merged(node, self.spec))
        return self.shapes[key]

    def _shape(self, schema: dict) -> Shape | None:
        properties = schema.get("properties")
        if not properties:
            return None
        closed = schema.get("additionalProperties") is False
        steps = []
        for name, node in properties.items():
            prop = merged(node, self.spec)
            steps.append(self._step(name, node, prop))
        if not closed:
            steps = [step for step in steps if step[0] != COPY]
            if not steps:
                return None
        return Shape(steps, closed)

    def _step(self, name: str, node: dict, prop: dict) -> tuple:
        if _is_money(prop):
            return MONEY, name, f"{name}{MINOR_UNITS}"
        if SHOWN_AS in prop:
            by = prop[SHOWN_AS]
            shapes = {
                kind: self.shape({"$ref": f"#/components/schemas/{schema}"})
                for kind, schema in by["schemas"].items()
            }
            return BY_KIND, name, (by["by"], shapes)
        if prop.get("type") == "array" and "items" in prop:
            item = self.shape(prop["items"])
            if item is not None:
                return EACH, name, item
        elif "properties" in prop:
            nested = self.shape(node)
            if nested is not None:
                return NESTED, name, nested
        return COPY, name, None

    def reading(self, node: dict) -> Reading | None:
        """The Reading of a body schema (an object's); None for anything else."""
        key = self._key(node)
        if key not in self.readings:
            self.readings[key] = self._reading(merged(node, self.spec))
        return self.readings[key]

    def _reading(self, schema: dict) -> Reading | None:
        properties = schema.get("properties")
        if properties is None:
            return None
        money_fields, each, writable = [], {}, set()
        for name, node in properties.items():
            prop = merged(node, self.spec)
            if prop.get("readOnly"):
                continue
            if _is_money(prop):
                money_fields.append(name)
                writable |= {f"{name}{MINOR_UNITS}", "currency"}
                continue
            writable.add(name)
            if prop.get("type") == "array" and "items" in prop:
                item = self.reading(prop["items"])
                if item is not None:
                    each[name] = item
        return Reading(tuple(money_fields), each, frozenset(writable))

    def answers(self, operation: dict) -> dict[int, Shape]:
        answers = {}
        for status, response in operation.get("responses", {}).items():
            if not str(status).startswith("2"):
                continue
            content = resolved(response, self.spec).get("content", {})
            if _JSON in content and "schema" in content[_JSON]:
                shape = self.shape(content[_JSON]["schema"])
                if shape is not None:
                    answers[int(status)] = shape
        return answers

    def body_reading(self, operation: dict) -> Reading | None:
        content = resolved(operation.get("requestBody", {}), self.spec).get("content", {})
        for media_type, described in content.items():
            if media_type.endswith("json") and "schema" in described:
                return self.reading(described["schema"])
        return None

    def kept(self, list_of: str | None) -> tuple[str, ...]:
        if list_of is None:
            return ()
        listed = merged({"$ref": f"#/components/schemas/{list_of}"}, self.spec)
        return tuple(
            name
            for name, node in listed.get("properties", {}).items()
            if "x-expansion" in merged(node, self.spec)
        )


def operation_shapes(spec: dict) -> dict[tuple[str, str], OperationShapes]:
    """Each operation's shapes, by its path template as the spec writes it and its method
    (`("/products/{id}", "PUT")`)."""
    built = _Built(spec)
    answers = {
        (template, method): built.answers(operation)
        for template, method, _, operation in operation_objects(spec)
    }
    return {
        (template, method.upper()): OperationShapes(
            reading=built.body_reading(operation),
            answers=answers[(template, method)],
            resource=answers.get((template, "get"), {}).get(200),
            listed="x-list-of" in operation,
            kept=built.kept(operation.get("x-list-of")),
        )
        for template, method, _, operation in operation_objects(spec)
    }


def event_shape(spec: dict) -> Shape | None:
    """How the spec's version shows an event (`Event`), its `data` in that version's form."""
    return _Built(spec).shape({"$ref": "#/components/schemas/Event"})


def event_shapes(specs: dict[int, dict]) -> dict[int, Shape | None]:
    """How each version of `specs` (by its number) shows an event."""
    return {version: event_shape(spec) for version, spec in specs.items()}


def served_event_shapes() -> dict[int, Shape | None]:
    """`event_shapes` of the versions served, from their spec files: for the worker, which
    delivers each webhook its events in the version it was registered through."""
    specs = spec_files.SPEC_FILES.items()
    return event_shapes({v: spec_files.load(spec_files.SPEC_DIR / name) for v, name in specs})
