"""Request validation that names every bad parameter and body field, and refuses what Connexion lets
through (readOnly fields, non-UTF-8 bodies, NUL, lone surrogates). Why: docs/contract.md."""

import collections
import json
from urllib.parse import parse_qsl

from connexion.datastructures import MediaTypeDict
from connexion.exceptions import BadRequestProblem
from connexion.json_schema import Draft4RequestValidator
from connexion.utils import is_null, is_nullable
from connexion.validators import VALIDATOR_MAP, FormDataValidator, JSONRequestBodyValidator
from connexion.validators import ParameterValidator as ConnexionParameterValidator
from jsonschema import Draft4Validator, ValidationError
from jsonschema.exceptions import best_match
from jsonschema.validators import extend

from shopapi.contract.formats import FORMAT_CHECKER
from shopapi.web.problems import ValidationProblem


def _refuse_read_only(validator, read_only, instance, schema):
    if read_only:
        yield ValidationError("is read-only and cannot be sent")


_BodySchemaValidator = extend(Draft4RequestValidator, {"readOnly": _refuse_read_only})

# Compiled validators by (validator class, schema). Connexion builds its validators anew for
# every request; the schemas are the spec's own, alive as long as the app. Bounded, for a process
# that builds many apps (the tests).
_compiled: dict[tuple[type, int], tuple[dict, object]] = {}
_MAX_COMPILED = 4096


def _compiled_validator(cls, schema: dict):
    """`cls(schema)`, built once per schema (the schema is kept so that its id is not reused)."""
    key = (cls, id(schema))
    cached = _compiled.get(key)
    if cached is None or cached[0] is not schema:
        if len(_compiled) >= _MAX_COMPILED:
            _compiled.clear()
        cached = _compiled[key] = (schema, cls(schema, format_checker=FORMAT_CHECKER))
    return cached[1]


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


def _detail(error: ValidationError) -> str:
    """What is wrong, in jsonschema's words, except that a secret (a password) is not quoted
    back: the message would carry it into the response and any log of it."""
    schema = error.schema if isinstance(error.schema, dict) else {}
    if schema.get("format") == "password" or schema.get("writeOnly"):
        return f"does not satisfy {error.validator} {error.validator_value!r}"
    return error.message


def body_errors(validator, body) -> list[dict]:
    """Every problem with a request body, each with a JSON pointer, text problems first (a
    value that is not text is not reported against its schema as well)."""
    errors, not_text = [], set()
    for where, problem, is_value in _text_errors(body):
        errors.append({"pointer": where, "detail": problem})
        if is_value:
            not_text.add(where)
    for error in sorted(validator.iter_errors(body), key=lambda e: list(e.path)):
        where = pointer(error.path)
        if where not in not_text:
            errors.append({"pointer": where, "detail": _detail(error)})
    return errors


def _refuse_constant(name):
    raise ValueError(f"{name} is not JSON")


class RequestBodyValidator(JSONRequestBodyValidator):
    @property
    def _validator(self):
        return _compiled_validator(_BodySchemaValidator, self._schema)

    async def _parse(self, stream, scope):
        raw = b"".join([message async for message in stream])
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

    def _validate(self, body):
        if body is None and not self._nullable:
            raise BadRequestProblem("The request body must not be empty.")
        errors = body_errors(self._validator, body)
        if errors:
            raise ValidationProblem(errors)
        return body


class ParameterValidator(ConnexionParameterValidator):
    @staticmethod
    def validate_parameter(parameter_type, value, param, param_name=None):
        if value is None or (is_nullable(param) and is_null(value)):
            return ConnexionParameterValidator.validate_parameter(
                parameter_type, value, param, param_name
            )
        # Connexion's own check uses jsonschema's lenient formats; bodies and parameters are held
        # to the same formats here (a `url[ne]` filter must be a URI, like the field).
        validator = _compiled_validator(Draft4Validator, param.get("schema", param))
        if validator.is_valid(value):
            return None
        error = best_match(validator.iter_errors(value))
        if error.validator == "maxLength":
            # Not jsonschema's message, which quotes the value: tens of thousands of characters.
            return f"is longer than {error.validator_value} characters"
        return error.message

    def validate_request(self, request):
        errors = []
        if self.strict_validation:
            for name in sorted(
                self.validate_query_parameter_list(request, self.security_query_params)
            ):
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
        given = collections.Counter(name for name, _ in query)
        for param in self.parameters.get("query", []):
            if given[param["name"]] > 1 and param.get("schema", {}).get("type") != "array":
                errors.append({"parameter": param["name"], "detail": "is given more than once"})
        for location in ("path", "query", "header", "cookie"):
            check = getattr(self, f"validate_{location}_parameter")
            for param in self.parameters.get(location, []):
                if location == "query" and param["name"] in not_text:
                    continue
                error = check(param, request)
                if error:
                    errors.append({"parameter": param["name"], "detail": error})
        if errors:
            raise ValidationProblem(errors)


class FormValidator(FormDataValidator):
    """Form bodies (the OAuth token request): every error listed, none logged — Connexion's
    form validator logs each failing value, passwords included. Undeclared fields are refused
    only where the schema says so: a token endpoint must ignore parameters it does not know
    (RFC 6749 3.2)."""

    def _validate(self, body):
        if self._strict_validation and self._schema.get("additionalProperties") is False:
            self._validate_params_strictly(body)
        errors = body_errors(self._validator, body)
        if errors:
            raise ValidationProblem(errors)
        return body


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
}
