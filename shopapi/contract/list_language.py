"""The list language, written into the contract: `with_list_language` gives every `x-list-of`
operation its filter, `sort`, `fields` and `cursor` parameters. The rules: docs/contract.md."""

import copy
import re

from shopapi.contract.operations import components, merged, operation_objects

ORDERED = ("lt", "lte", "gt", "gte")
_MEANING = {
    "ne": "is not",
    "lt": "is less than",
    "lte": "is at most",
    "gt": "is greater than",
    "gte": "is at least",
    "in": "is one of (comma-separated)",
    "contains": "contains, ignoring the case of ASCII letters,",
}
# A value PostgreSQL could not store cannot match anything either; refuse it like in bodies.
_NO_NUL = "^[^\\x00]*$"
# A decimal amount to compare with (format: decimal): up to four decimals compare exactly.
_DECIMAL = "^-?[0-9]{1,14}(\\.[0-9]{1,4})?$"
# Formats whose strings stand for another kind of value (a time, an amount): compared as that
# value, never searched as text.
_NOT_TEXT_FORMATS = ("date-time", "date", "decimal")
# The longest text filter value for a field that states no maxLength of its own (codes,
# identifiers, names set elsewhere, the service's own short texts): longer than any of them.
TEXT_FILTER_MAX_LENGTH = 1000


def listed_properties(resource: dict, spec: dict) -> dict[str, dict]:
    """The properties a list shows: every one but the write-only, and those only `expand`
    brings (`x-expansion`: another resource, filtered in its own list). `spec`: the contract
    `resource` is a schema of, where its references lead."""
    properties = {}
    for name, schema in resource.get("properties", {}).items():
        schema = merged(schema, spec)
        if not schema.get("writeOnly") and "x-expansion" not in schema:
            properties[name] = schema
    return properties


def filterable(properties: dict[str, dict], spec: dict) -> dict[str, dict]:
    """The scalar properties, and those of object properties under dotted names."""
    scalars = {}
    for name, schema in properties.items():
        if schema.get("type") == "object":
            inner = listed_properties(schema, spec)
            scalars.update({f"{name}.{n}": s for n, s in filterable(inner, spec).items()})
        elif schema.get("type") != "array":
            scalars[name] = schema
    return scalars


def is_text(schema: dict) -> bool:
    """Whether a property is text: a string that is not an enum, a time or an amount."""
    return (
        schema["type"] == "string"
        and "enum" not in schema
        and schema.get("format") not in _NOT_TEXT_FORMATS
    )


def operators_for(schema: dict) -> tuple[str, ...]:
    kind = schema["type"]
    if kind == "boolean":
        return ("eq", "ne")
    if "enum" in schema:
        return ("eq", "ne", "in")
    if is_text(schema):
        return ("eq", "ne", *ORDERED, "in", "contains")
    return ("eq", "ne", *ORDERED, "in")


def _value_schema(schema: dict, operator: str) -> dict:
    """What a filter value must be: the property's type, format and enum — not its minimum,
    minLength or pattern, since asking for a value that cannot exist simply matches nothing —
    and for text, a length a stored value can have. A `[contains]` value is a part of the text:
    any text, in no format."""
    value = {"type": schema["type"]}
    keywords = ("enum",) if operator == "contains" else ("format", "enum")
    for keyword in keywords:
        if keyword in schema:
            value[keyword] = schema[keyword]
    if "enum" in value:
        # A nullable field's `null` is no value a query string can carry.
        value["enum"] = [choice for choice in value["enum"] if choice is not None]
    if value.get("format") == "decimal":
        value["pattern"] = _DECIMAL
    elif value["type"] == "string" and "enum" not in value:
        value["pattern"] = _NO_NUL
    if is_text(schema):
        value["maxLength"] = schema.get("maxLength", TEXT_FILTER_MAX_LENGTH)
    if value["type"] == "integer":
        # What the databases can compare (64-bit), not what the field accepts.
        value.update(minimum=-(2**63), maximum=2**63 - 1)
    return value


def _filter_parameter(name: str, schema: dict, operator: str) -> dict:
    value = _value_schema(schema, operator)
    parameter = {"in": "query", "required": False}
    if operator == "eq":
        parameter["name"] = name
        parameter["description"] = f"Only items whose `{name}` is this value."
    else:
        parameter["name"] = f"{name}[{operator}]"
        parameter["description"] = f"Only items whose `{name}` {_MEANING[operator]} this value."
    if operator in ("eq", "ne") and schema.get("nullable"):
        value["nullable"] = True
        parameter["description"] += " `null` stands for a missing value."
    if operator == "in":
        value = {"type": "array", "items": value, "minItems": 1, "maxItems": 100}
        parameter.update(style="form", explode=False)
    parameter["schema"] = value
    return parameter


def _names_pattern(names, signed: bool) -> str:
    choice = "|".join(re.escape(name) for name in names)
    key = f"-?(?:{choice})" if signed else f"(?:{choice})"
    return f"^{key}(?:,{key})*$"


def _sort_example(sortable: dict[str, dict]) -> str:
    """A sort this resource really has: newest first by its first time field, else by id."""
    times = [name for name, schema in sortable.items() if schema.get("format") == "date-time"]
    return f"-{times[0]},id" if times else "-id"


def list_parameters(properties: dict[str, dict], spec: dict) -> list[dict]:
    """The list language's parameters for a resource with these `properties`. No `example`:
    Swagger UI would fill it in and send it with every "Try it out"; the descriptions show one."""
    sortable = filterable(properties, spec)
    parameters = [
        _filter_parameter(name, schema, operator)
        for name, schema in sortable.items()
        for operator in operators_for(schema)
    ]
    shown = ",".join(list(properties)[:2])
    parameters += [
        {
            "name": "sort",
            "in": "query",
            "description": (
                "Sort keys, comma-separated; `-` sorts a key descending (for example "
                f"`{_sort_example(sortable)}`). Ascending `id` breaks remaining ties. Missing "
                "values sort last ascending and first descending; text sorts by code point. "
                "Default: `id`."
            ),
            "schema": {"type": "string", "pattern": _names_pattern(sortable, signed=True)},
        },
        {
            "name": "fields",
            "in": "query",
            "description": (
                f"Only these top-level fields of each item, comma-separated (for example "
                f"`{shown}`)."
            ),
            "schema": {"type": "string", "pattern": _names_pattern(properties, signed=False)},
        },
        CURSOR,
    ]
    return parameters


CURSOR = {
    "name": "cursor",
    "in": "query",
    "description": (
        "Continue after the last item of a previous page: the `meta.next_cursor` it returned. "
        "Opaque and signed; valid only with the same filters and sort. Not together with `page`."
    ),
    "schema": {"type": "string", "maxLength": 2048, "pattern": "^[A-Za-z0-9_.-]+$"},
}


def _component_name(resource: str, parameter: dict) -> str:
    """`ProductFields.price_cents.gte` for `price_cents[gte]`: component names allow no brackets
    (OpenAPI 3.0.3, 4.8.7.1). The cursor is the same for every list."""
    if parameter is CURSOR:
        return "cursor"
    name, _, operator = parameter["name"].partition("[")
    return f"{resource}.{name}" + (f".{operator.rstrip(']')}" if operator else "")


def with_list_language(spec: dict) -> dict:
    """A copy of `spec` in which every `x-list-of` operation refers to the list language's
    parameters, declared once per listed resource under `components/parameters`."""
    spec = copy.deepcopy(spec)
    schemas = components(spec, "schemas")
    shared = components(spec, "parameters")
    references: dict[str, list[dict]] = {}
    for _, _, _, operation in operation_objects(spec):
        resource = operation.get("x-list-of")
        if resource is None:
            continue
        if resource not in references:
            properties = listed_properties(schemas[resource], spec)
            references[resource] = []
            for parameter in list_parameters(properties, spec):
                name = _component_name(resource, parameter)
                shared[name] = copy.deepcopy(parameter)
                references[resource].append({"$ref": f"#/components/parameters/{name}"})
        operation.setdefault("parameters", []).extend(copy.deepcopy(references[resource]))
    return spec
