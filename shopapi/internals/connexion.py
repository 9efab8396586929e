"""Connexion's private API, each use held by tests/test_internals.py (TestConnexion).

Connexion 3 documents its apps' options (validator_map, security_map, uri_parser_class,
middlewares) but not the classes those options take apart from their names: what follows
overrides their private steps, or reads what Connexion keeps to itself, where no option does
what the service needs."""

import functools

from connexion.datastructures import MediaTypeDict
from connexion.decorators.parameter import sanitized as _sanitized
from connexion.json_schema import Draft4RequestValidator, Draft4ResponseValidator
from connexion.middleware.exceptions import ExceptionMiddleware
from connexion.middleware.routing import RoutingMiddleware
from connexion.middleware.swagger_ui import SwaggerUIAPI, SwaggerUIMiddleware
from connexion.security import SECURITY_HANDLERS, AbstractSecurityHandler
from connexion.spec import Specification
from connexion.uri_parsing import QUERY_STRING_DELIMITERS, OpenAPIURIParser
from connexion.utils import is_null, is_nullable
from connexion.validators import (
    VALIDATOR_MAP,
    FormDataValidator,
    JSONRequestBodyValidator,
    JSONResponseBodyValidator,
    ParameterValidator,
)
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Scope

__all__ = [  # undocumented names of Connexion's, used as they are
    "QUERY_STRING_DELIMITERS",
    "VALIDATOR_MAP",
    "Draft4RequestValidator",
    "Draft4ResponseValidator",
    "MediaTypeDict",
    "OpenAPIURIParser",
    "ParameterValidator",
    "is_null",
    "is_nullable",
]


def replace_flask_bridge(app, bridge: ASGIApp) -> None:
    """Serve `app`'s Flask through `bridge` instead of Connexion's a2wsgi: FlaskApp has no
    option for it, and its private `_middleware_app` (the inner ASGI app) is where the bridge
    sits."""
    app._middleware_app.asgi_app = bridge


def flask_bridge(app) -> ASGIApp:
    """The bridge `app`'s Flask is served through (see replace_flask_bridge)."""
    return app._middleware_app.asgi_app


def check_specs_with(check) -> None:
    """Have Connexion check each spec it loads against the OpenAPI schema through
    `check(spec, validate)`, `validate` being its own check: Connexion has no option for it, and
    its Specification's private `_validate_spec` is where the check runs."""
    validate = _own_spec_check()
    Specification._validate_spec = classmethod(
        lambda cls, spec: check(spec, lambda checked: validate(cls, checked))
    )


def wrap_own_spec_check(wrap) -> None:
    """Replace Connexion's own spec check by `wrap(check)` (a function of the Specification
    class and the spec) for the rest of the process: check_specs_with then wraps the result."""
    _CONNEXION_VALIDATE["validate"] = wrap(_own_spec_check())
    Specification._validate_spec = classmethod(_CONNEXION_VALIDATE["validate"])


def _own_spec_check():
    return _CONNEXION_VALIDATE.setdefault("validate", Specification._validate_spec.__func__)


# Connexion's own check, kept on the first replacement so that replacing it again (each app a
# process builds) wraps the original, not the previous wrapper.
_CONNEXION_VALIDATE: dict = {}


class _SignatureReadOnce:
    """Connexion's security handlers read the check function's signature (inspect.signature,
    twice) on every request, in their private `_accepts_kwarg`, to learn which arguments it
    takes; it cannot change, so once is enough."""

    @staticmethod
    @functools.cache  # bounded: one entry per check function and keyword, the app's few
    def _accepts_kwarg(func, keyword: str) -> bool:
        return accepts_kwarg(func, keyword)


def accepts_kwarg(func, keyword: str) -> bool:
    """Whether Connexion passes `keyword` to a security check function (it reads the function's
    signature to decide, in the security handlers' private `_accepts_kwarg`)."""
    return AbstractSecurityHandler._accepts_kwarg(func, keyword)


def security_handlers_reading_signatures_once() -> dict:
    """Connexion's handler for each security scheme type (its undocumented SECURITY_HANDLERS),
    each reading a check function's signature once (FlaskApp(security_map=...))."""
    return {
        kind: type(handler.__name__, (_SignatureReadOnce, handler), {})
        for kind, handler in SECURITY_HANDLERS.items()
    }


def sanitized(name: str) -> str:
    """The Python argument name Connexion gives a query parameter (`price_cents[gte]`): its
    undocumented connexion.decorators.parameter.sanitized."""
    return _sanitized(name)


def share_request_notes(scope: Scope) -> None:
    """Make the dicts in which Connexion's router and security note what they found part of
    this scope, so that a layer outside them reads the notes once they have run: the router
    passes a copy of the scope inwards, which shares these dicts only if they exist already."""
    scope.setdefault("extensions", {})
    scope.setdefault("state", {})


def routed_to(scope: Scope) -> tuple[str | None, str | None]:
    """The API base path (`/v1`) and handler (its dotted path) Connexion's router matched, from
    its undocumented `connexion_routing` scope extension."""
    routing = scope.get("extensions", {}).get("connexion_routing", {})
    return routing.get("api_base_path"), routing.get("operation_id")


def token_info(scope: Scope) -> dict | None:
    """The claims of the credentials Connexion's security accepted, if any, from its
    undocumented `connexion_context` scope extension."""
    return scope.get("extensions", {}).get("connexion_context", {}).get("token_info")


def error_answering(app: ASGIApp, handlers) -> ExceptionMiddleware:
    """`app`, its exceptions answered as the stack's own ExceptionMiddleware answers them (with
    the app's error handlers, `handlers`): a second instance of that middleware, which Connexion
    builds only inside its stack and does not document. It notes its handlers in the scope it
    is given (Starlette's `starlette.exception_handlers`): pass it a copy."""
    answering = ExceptionMiddleware(app)
    for exception, handler in handlers.items():
        answering.add_exception_handler(exception, handler)
    return answering


def router_of(middleware):
    """The Starlette router of Connexion's routing or docs middleware: the undocumented
    `router` attribute, built by `add_api`."""
    return middleware.router


class HookedURIParser(OpenAPIURIParser):
    """Connexion's OpenAPI URI parser, its private steps given public names:
    `parameter_maps(param_defns)` gives (definitions by name, schemas by name) — Connexion's
    __init__ rebuilds both for each parser, several a request — and
    `join_repeated(values, param_defn, location)` joins a parameter's repeated values (its
    private `_resolve_param_duplicates`). Connexion's __init__ is not called: it would build
    the maps again."""

    def __init__(self, param_defns, body_defn):
        self._param_defns, self._param_schemas = self.parameter_maps(param_defns)
        self._body_schema = body_defn.get("schema", {})
        self._body_encoding = body_defn.get("encoding", {})

    @staticmethod
    def parameter_maps(param_defns: list[dict]) -> tuple[dict, dict]:
        raise NotImplementedError

    @staticmethod
    def join_repeated(values: list[str], param_defn: dict, location: str) -> str:
        raise NotImplementedError

    @property
    def param_schemas(self):
        return self._param_schemas

    def _resolve_param_duplicates(self, values, param_defn, _in):
        return self.join_repeated(values, param_defn, _in)


class HookedJSONBodyValidator(JSONRequestBodyValidator):
    """Connexion's JSON request body validator, its private steps given public names:
    `compiled(schema)` the jsonschema validator, `parse(raw)` the body from its bytes,
    `validate(body)` the check; `schema` and `nullable` what it was built with."""

    @property
    def schema(self) -> dict:
        return self._schema

    @property
    def nullable(self) -> bool:
        return self._nullable

    @property
    def _validator(self):
        return self.compiled(self._schema)

    async def _parse(self, stream, scope):
        return self.parse(b"".join([message async for message in stream]))

    def _validate(self, body):
        return self.validate(body)


class HookedFormValidator(FormDataValidator):
    """Connexion's form body validator, its private steps given public names: `compiled(schema)`
    the jsonschema validator, `validate(body)` the check; `schema` and `strict_validation` what
    it was built with, `refuse_unknown_fields(body)` its strict check of field names."""

    @property
    def schema(self) -> dict:
        return self._schema

    @property
    def strict_validation(self) -> bool:
        return self._strict_validation

    def refuse_unknown_fields(self, body: dict) -> None:
        self._validate_params_strictly(body)

    @property
    def _validator(self):
        return self.compiled(self._schema)

    def _validate(self, body):
        return self.validate(body)


class HookedResponseBodyValidator(JSONResponseBodyValidator):
    """Connexion's JSON response validator, its private schema named: `compiled(schema)` the
    jsonschema validator of a response."""

    @property
    def validator(self):
        return self.compiled(self._schema)


class HookedParameterValidator(ParameterValidator):
    """Connexion's parameter validator, its grouping of the parameters given a public name:
    `declare(parameters)` returns the operation's parameters grouped as the checks read them,
    with `by_location` (Connexion's own __init__, not called, groups them again for every
    request); it is kept as `declared`."""

    def __init__(self, parameters, uri_parser, strict_validation=False, security_query_params=None):
        self.declared = self.declare(parameters)
        self.parameters = self.declared.by_location
        self.uri_parser = uri_parser
        self.strict_validation = strict_validation
        self.security_query_params = set(security_query_params or [])

    @staticmethod
    def declare(parameters: list[dict]):
        raise NotImplementedError


class TemplatedSwaggerUIAPI(SwaggerUIAPI):
    """Connexion's docs UI (the undocumented SwaggerUIAPI) rendering its page from the templates
    in `directory` (its private `_templates`), Swagger UI's assets still the bundle's: Connexion
    has no option for a page of one's own."""

    directory: str = ""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._templates = Jinja2Templates(directory=self.directory)


def load_spec(spec: dict) -> Specification:
    """Connexion's loading of a spec (its undocumented Specification.load), which runs its
    check of the spec: for the test of check_specs_with."""
    return Specification.load(spec)


# What the above relies on of Connexion's insides, checked against the installed release by
# tests/test_internals.py: (owner, name, the parameters it takes, or None for an attribute).
RELIED_UPON = [
    (Specification, "_validate_spec", ["spec"]),
    (AbstractSecurityHandler, "_accepts_kwarg", ["func", "keyword"]),
    (OpenAPIURIParser, "__init__", ["self", "param_defns", "body_defn"]),
    (OpenAPIURIParser, "_param_defns", None),
    (OpenAPIURIParser, "_body_schema", None),
    (OpenAPIURIParser, "_body_encoding", None),
    (OpenAPIURIParser, "_resolve_param_duplicates", ["values", "param_defn", "_in"]),
    (JSONRequestBodyValidator, "_schema", None),
    (JSONRequestBodyValidator, "_nullable", None),
    (JSONRequestBodyValidator, "_validator", None),
    (JSONRequestBodyValidator, "_parse", ["self", "stream", "scope"]),
    (JSONRequestBodyValidator, "_validate", ["self", "body"]),
    (FormDataValidator, "_strict_validation", None),
    (FormDataValidator, "_validator", None),
    (FormDataValidator, "_validate", ["self", "body"]),
    (FormDataValidator, "_validate_params_strictly", ["self", "data"]),
    (JSONResponseBodyValidator, "_schema", None),
    (JSONResponseBodyValidator, "validator", None),
    (
        ParameterValidator,
        "__init__",
        ["self", "parameters", "uri_parser", "strict_validation", "security_query_params"],
    ),
    (ParameterValidator, "parameters", None),
    (ParameterValidator, "uri_parser", None),
    (ParameterValidator, "strict_validation", None),
    (ParameterValidator, "security_query_params", None),
    (RoutingMiddleware, "router", None),
    (SwaggerUIMiddleware, "router", None),
    (SwaggerUIMiddleware, "default_fn", None),
    (SwaggerUIAPI, "_templates", None),
]
