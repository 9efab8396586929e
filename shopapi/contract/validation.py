"""Request validation that names every bad parameter and body field, and refuses what Connexion lets
through (readOnly fields, non-UTF-8 bodies, NUL, lone surrogates). Why: docs/contract.md."""

import collections
import dataclasses
import json
from urllib.parse import parse_qsl

from connexion.exceptions import BadRequestProblem
from jsonschema import Draft4Validator, ValidationError
from jsonschema.exceptions import best_match
from jsonschema.validators import extend

from shopapi.auth.oauth import OAuthError
from shopapi.contract.formats import FORMAT_CHECKER
from shopapi.contract.patterns import ecma_regex
from shopapi.contract.per_definition import PerDefinition
from shopapi.internals.connexion import (
    VALIDATOR_MAP,
    Draft4RequestValidator,
    Draft4ResponseValidator,
    HookedFormValidator,
    HookedJSONBodyValidator,
    HookedParameterValidator,
    HookedResponseBodyValidator,
    MediaTypeDict,
    is_null,
    is_nullable,
)
from shopapi.internals.connexion import ParameterValidator as ConnexionParameterValidator
from shopapi.web.problems import ValidationProblem


def _refuse_read_only(validator, read_only, instance, schema):
    if read_only:
        yield ValidationError("is read-only and cannot be sent")


def _ecma_pattern(validator, pattern, instance, schema):
    """`pattern` as ECMA-262 reads it, as the contract means it (jsonschema's uses Python's
    reading, where `^[0-9a-f]{64}$` takes a token ending in a newline)."""
    if validator.is_type(instance, "string") and not ecma_regex(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


_PATTERN = {"pattern": _ecma_pattern}
_BodySchemaValidator = extend(Draft4RequestValidator, {"readOnly": _refuse_read_only, **_PATTERN})
_ParameterSchemaValidator = extend(Draft4Validator, _PATTERN)
_FormSchemaValidator = extend(Draft4RequestValidator, _PATTERN)
_ResponseSchemaValidator = extend(Draft4ResponseValidator, _PATTERN)

# Each schema's validator, compiled once (Connexion compiles one for every request).
_body_validator = PerDefinition(
    lambda schema: _BodySchemaValidator(schema, format_checker=FORMAT_CHECKER)
)
_parameter_validator = PerDefinition(
    lambda schema: _ParameterSchemaValidator(schema, format_checker=FORMAT_CHECKER)
)
# Forms and responses keep Connexion's formats; only their patterns are read otherwise.
_form_validator = PerDefinition(
    lambda schema: _FormSchemaValidator(schema, format_checker=Draft4Validator.FORMAT_CHECKER)
)
_response_validator = PerDefinition(
    lambda schema: _ResponseSchemaValidator(schema, format_checker=Draft4Validator.FORMAT_CHECKER)
)


def pointer(path) -> str:
    """A JSON pointer (RFC 6901) for a path of keys and indexes."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)


def text_problem(text: str) -> str | None:
    """Why `text` is not text that can be stored, or None when it is."""
    if "\x00" in text:
        return "must not contain NUL characters"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "must not contain unpaired surrogates"
    return None


def _text_errors(instance, path=()):
    """(pointer, problem, whether a value rather than a property name is the problem) for
    each string in `instance` that is not text that can be stored."""
    if isinstance(instance, str):
        problem = text_problem(instance)
        if problem:
            yield pointer(path), problem, True
    elif isinstance(instance, dict):
        for key, value in instance.items():
            problem = text_problem(key)
            if problem:
                yield pointer(path), f"a property name {problem}", False
            else:
                yield from _text_errors(value, (*path, key))
    elif isinstance(instance, list):
        for index, value in enumerate(instance):
            yield from _text_errors(value, (*path, index))


# Rules whose messages name properties (the schema's, or the ones sent), never a value.
_NAMING_PROPERTIES = frozenset({"required", "additionalProperties", "dependencies", "readOnly"})


def _detail(error: ValidationError) -> str:
    """Which rule the value breaks, in the contract's terms and never quoting the value, whatever
    the field: jsonschema's messages start with it, and a device's token, a refresh token or a
    password would reach the response and any log of it."""
    rule = error.validator_value
    match error.validator:
        case "type":
            types = rule if isinstance(rule, list) else [rule]
            return f"is not of type {', '.join(map(repr, types))}"
        case "pattern":
            return f"does not match '{rule}'"  # as the contract writes it, unescaped
        case "format":
            return f"is not a {rule!r}"
        case "maxLength":
            return f"is longer than {rule} characters"
        case "minLength":
            return f"is shorter than {rule} characters"
        case "enum":
            return f"is not one of {rule!r}"
        case "minimum":
            return f"is less than{_or_equal(error)} the minimum of {rule}"
        case "maximum":
            return f"is greater than{_or_equal(error)} the maximum of {rule}"
        case "multipleOf":
            return f"is not a multiple of {rule}"
        case "minItems" | "minProperties":
            return f"has fewer than {rule} {error.validator[3:].lower()}"
        case "maxItems" | "maxProperties":
            return f"has more than {rule} {error.validator[3:].lower()}"
        case "uniqueItems":
            return "has items that are not unique"
        case "oneOf" if not error.context:
            return "is valid under more than one of the given schemas"
        case "oneOf" | "anyOf":
            return "is not valid under any of the given schemas"
        case validator if validator in _NAMING_PROPERTIES:
            return error.message
    return f"does not satisfy {error.validator}"


def _or_equal(error: ValidationError) -> str:
    """Draft 4's exclusiveMinimum and exclusiveMaximum are flags beside the bound."""
    flag = "exclusive" + error.validator.capitalize()
    return " or equal to" if isinstance(error.schema, dict) and error.schema.get(flag) else ""


def _reported(error: ValidationError):
    """`error`, or for a oneOf or anyOf that no alternative satisfies, the errors of the one
    alternative the value was meant for: the only one whose top-level `enum`s it satisfies (a
    device's `platform` picks its shape). Each error's `absolute_path` locates it."""
    if error.validator in ("oneOf", "anyOf") and error.context:
        alternatives = collections.defaultdict(list)
        for sub in error.context:
            alternatives[sub.relative_schema_path[0]].append(sub)
        meant = [
            errors
            for errors in alternatives.values()
            if not any(e.validator == "enum" and len(e.relative_path) <= 1 for e in errors)
        ]
        if len(meant) == 1:
            for sub in meant[0]:
                yield from _reported(sub)
            return
    yield error


def body_errors(validator, body) -> list[dict]:
    """Every problem with a request body, each with a JSON pointer, text problems first (a
    value that is not text is not reported against its schema as well)."""
    errors, not_text = [], set()
    for where, problem, is_value in _text_errors(body):
        errors.append({"pointer": where, "detail": problem})
        if is_value:
            not_text.add(where)
    reported = [error for found in validator.iter_errors(body) for error in _reported(found)]
    for error in sorted(reported, key=lambda e: list(e.absolute_path)):
        where = pointer(error.absolute_path)
        if where not in not_text:
            errors.append({"pointer": where, "detail": _detail(error)})
    return errors


def _refuse_constant(name):
    raise ValueError(f"{name} is not JSON")


class RequestBodyValidator(HookedJSONBodyValidator):
    compiled = _body_validator

    def parse(self, raw: bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise BadRequestProblem(
                f"The request body is not valid UTF-8 ({error.reason})."
            ) from None
        if not text:
            return None
        try:
            return json.loads(text, parse_constant=_refuse_constant)
        except (ValueError, RecursionError) as error:
            # ValueError covers malformed JSON, NaN/Infinity and integers past Python's digit
            # limit; RecursionError a pathologically deep nesting.
            raise BadRequestProblem(f"The request body is not valid JSON: {error}") from None

    def validate(self, body):
        if body is None and not self.nullable:
            raise BadRequestProblem("The request body must not be empty.")
        errors = body_errors(self.compiled(self.schema), body)
        if errors:
            raise ValidationProblem(errors)
        return body


@dataclasses.dataclass(frozen=True)
class _Declared:
    """An operation's parameters, grouped the way the checks read them."""

    by_location: dict[str, list[dict]]
    query_names: frozenset[str]
    single_valued_query: tuple[str, ...]
    # Each is (order, location, definition): checked in the order Connexion checks them.
    required: tuple[tuple[int, str, dict], ...]
    # The optional ones by location and the key the request holds them under.
    optional: dict[tuple[str, str], tuple[int, str, dict]]


def _declare(parameters: list[dict]) -> _Declared:
    by_location = collections.defaultdict(list)
    for param in parameters:
        by_location[param["in"]].append(param)
    ordered = [(location, param) for location in _LOCATIONS for param in by_location[location]]
    required, optional = [], {}
    for order, (location, param) in enumerate(ordered):
        if param.get("required"):
            required.append((order, location, param))
        else:
            optional[location, _held_as(param["name"], location)] = (order, location, param)
    query = by_location["query"]
    return _Declared(
        by_location=by_location,
        query_names=frozenset(param["name"] for param in query),
        single_valued_query=tuple(
            param["name"] for param in query if param.get("schema", {}).get("type") != "array"
        ),
        required=tuple(required),
        optional=optional,
    )


def _held_as(name: str, location: str) -> str:
    """The key a ConnexionRequest holds a parameter under: path parameters by their Python name
    (Connexion's validate_path_parameter), header fields lowercased (Starlette's)."""
    if location == "path":
        return name.replace("-", "_")
    return name.lower() if location == "header" else name


_LOCATIONS = ("path", "query", "header", "cookie")
_declared = PerDefinition(_declare)


class ParameterValidator(HookedParameterValidator):
    # Connexion's own __init__ groups the parameters again for every request.
    declare = _declared

    @staticmethod
    def validate_parameter(parameter_type, value, param, param_name=None):
        if value is None or (is_nullable(param) and is_null(value)):
            return ConnexionParameterValidator.validate_parameter(
                parameter_type, value, param, param_name
            )
        # Connexion's own check uses jsonschema's lenient formats; bodies and parameters are held
        # to the same formats here (a `url[ne]` filter must be a URI, like the field).
        validator = _parameter_validator(param.get("schema", param))
        if validator.is_valid(value):
            return None
        return _detail(best_match(validator.iter_errors(value)))

    def validate_request(self, request):
        declared = self.declared
        errors = []
        if self.strict_validation:
            known = declared.query_names | self.security_query_params
            for name in sorted(request.query_params.keys() - known):
                errors.append({"parameter": name, "detail": "is not a parameter of this operation"})
        query = parse_qsl(request.scope["query_string"].decode("latin-1"), keep_blank_values=True)
        # A value that is not text is named once, whatever else its parameter would say of it.
        not_text = set()
        for name, value in query:
            problem = text_problem(value)
            if problem and name not in not_text:
                not_text.add(name)
                errors.append({"parameter": name, "detail": problem})
        # Connexion would quietly keep one of the values of a repeated single-valued parameter
        # (`?sku=A&sku=B`); which one the client meant cannot be known.
        if len(query) > 1:
            given = collections.Counter(name for name, _ in query)
            for name in declared.single_valued_query:
                if given[name] > 1:
                    errors.append({"parameter": name, "detail": "is given more than once"})
        # What is required, and of the rest only what is given: a list declares about eighty
        # query parameters (its filters), and an absent optional one has nothing to check.
        checked = list(declared.required)
        for location in _LOCATIONS:
            if declared.by_location[location]:
                for held_as in getattr(request, _GIVEN[location]):
                    param = declared.optional.get((location, held_as))
                    if param is not None:
                        checked.append(param)
        for _, location, param in sorted(checked, key=lambda entry: entry[0]):
            if location == "query" and param["name"] in not_text:
                continue
            error = getattr(self, f"validate_{location}_parameter")(param, request)
            if error:
                errors.append({"parameter": param["name"], "detail": error})
        if errors:
            raise ValidationProblem(errors)


# Where a ConnexionRequest holds each location's parameters, as its validate_*_parameter read them.
_GIVEN = {"path": "path_params", "query": "query_params", "header": "headers", "cookie": "cookies"}


class FormValidator(HookedFormValidator):
    """Form bodies (the OAuth token request): every error listed, none logged — Connexion's
    form validator logs each failing value, passwords included. Undeclared fields are refused
    only where the schema says so: a token endpoint must ignore parameters it does not know
    (RFC 6749 3.2)."""

    compiled = _form_validator

    def validate(self, body):
        if self.strict_validation and self.schema.get("additionalProperties") is False:
            self.refuse_unknown_fields(body)
        if next(_text_errors(body), None) is None:  # a NUL is named as everywhere else
            _check_grant_type(self.schema, body)
        errors = body_errors(self.compiled(self.schema), body)
        if errors:
            raise ValidationProblem(errors)
        return body


def _check_grant_type(schema: dict, body: dict) -> None:
    """A token request's grant type, refused as RFC 6749 5.2 says (OAuth client libraries read
    its `error`), not as a problem detail: missing is `invalid_request`, one the contract does
    not list `unsupported_grant_type`."""
    grant_types = schema.get("properties", {}).get("grant_type", {}).get("enum")
    if grant_types is None:
        return
    if not body.get("grant_type"):
        raise OAuthError("invalid_request", "Missing grant_type.")
    if body["grant_type"] not in grant_types:
        raise OAuthError("unsupported_grant_type", f"Grant types: {', '.join(grant_types)}.")


class ResponseBodyValidator(HookedResponseBodyValidator):
    """Responses (VALIDATE_RESPONSES) held to the contract's patterns as requests are."""

    compiled = _response_validator


validator_map = {
    **VALIDATOR_MAP,
    "parameter": ParameterValidator,
    "body": MediaTypeDict(
        {
            **VALIDATOR_MAP["body"],
            "*/*json": RequestBodyValidator,
            "application/x-www-form-urlencoded": FormValidator,
        }
    ),
    "response": MediaTypeDict({**VALIDATOR_MAP["response"], "*/*json": ResponseBodyValidator}),
}
