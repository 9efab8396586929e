"""No code outside shopapi/internals/ reaches into a library's private API: every such use sits
in that package's module for its library, held by tests/test_internals.py, so that an upgrade
fails in one named place. This reads the source of the service, its tests and its benchmarks
(no allowlist) for what would creep in: an import of a library module its documentation does
not present, a private name of the library read, set or overridden, or a subclass of one of its
classes that replaces __init__ without calling it."""

import ast
import functools
import importlib
import inspect
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCANNED = ("app.py", "shopapi", "handlers", "models", "tests", "bench")
INTERNALS = ROOT / "shopapi" / "internals"

# The modules each library's documentation presents; any other is its insides. Starlette and
# Peewee's playhouse document theirs module by module: any not named private is public there.
PUBLIC_MODULES = {
    "connexion": {
        "connexion",
        "connexion.exceptions",
        "connexion.jsonifier",
        "connexion.lifecycle",
        "connexion.options",
        "connexion.resolver",
        # The middleware page's stack, for FlaskApp(middlewares=...).
        "connexion.middleware",
        "connexion.middleware.context",
        "connexion.middleware.exceptions",
        "connexion.middleware.lifespan",
        "connexion.middleware.request_validation",
        "connexion.middleware.response_validation",
        "connexion.middleware.routing",
        "connexion.middleware.security",
        "connexion.middleware.server_error",
        "connexion.middleware.swagger_ui",
    },
    "uvicorn": {"uvicorn", "uvicorn.config"},
    "uvicorn_worker": {"uvicorn_worker"},
    "a2wsgi": {"a2wsgi"},
    "peewee": {"peewee"},
    "starlette": None,
    "playhouse": None,
}
LIBRARIES = tuple(PUBLIC_MODULES)

# Names with a leading underscore that are public by documentation: Peewee's model metadata
# (Model._meta, "Model options and table metadata") and a named tuple's methods.
DOCUMENTED = frozenset({"_meta", "_replace", "_asdict", "_fields", "_make"})


def _library(module: str) -> str | None:
    top = module.split(".")[0]
    return top if top in PUBLIC_MODULES else None


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in DOCUMENTED


def _public_module(module: str) -> bool:
    if any(part.startswith("_") for part in module.split(".")):
        return False
    public = PUBLIC_MODULES[_library(module)]
    return public is None or module in public


def _sources() -> list[pathlib.Path]:
    found = []
    for name in SCANNED:
        path = ROOT / name
        paths = [path] if path.is_file() else sorted(path.rglob("*.py"))
        found += [
            p for p in paths if not p.is_relative_to(INTERNALS) and "node_modules" not in p.parts
        ]
    return found


def _assigned_names(tree: ast.AST) -> set[str]:
    """The names `tree` defines: functions, classes, attributes and variables it assigns."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


@functools.cache
def _library_private_names() -> frozenset[str]:
    """Every private name the libraries define, and the dunder attributes of their own
    (Peewee's `__data__`) that are no part of Python's data model."""
    names = set()
    for library in LIBRARIES:
        spec = importlib.util.find_spec(library)
        roots = spec.submodule_search_locations or [pathlib.Path(spec.origin).parent]
        paths = (
            sorted(pathlib.Path(roots[0]).rglob("*.py"))
            if spec.submodule_search_locations
            else [pathlib.Path(spec.origin)]
        )
        for path in paths:
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for name in _assigned_names(tree):
                if _is_private(name):
                    names.add(name)
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.ctx, ast.Store)
                    and re.fullmatch(r"__\w+__", node.attr)
                    and not hasattr(object, node.attr)
                    and node.attr not in ("__dict__", "__wrapped__", "__signature__")
                ):
                    names.add(node.attr)
    return frozenset(names)


@functools.cache
def _our_names() -> frozenset[str]:
    return frozenset().union(*(_assigned_names(ast.parse(p.read_text())) for p in _sources()))


def _imports(tree: ast.AST) -> dict[str, str]:
    """Each name a module binds by import, and the dotted path it stands for."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    bound[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return bound


def _resolve(dotted: str):
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            value = getattr(value, part, None)
        return value
    return None


def _dotted(node: ast.expr, bound: dict[str, str]) -> str | None:
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, bound)
        return base and f"{base}.{node.attr}"
    return None


def _library_bases(cls: ast.ClassDef, bound, classes) -> list[type]:
    """The library classes `cls` inherits from, through imported bases (of the libraries, or
    of the service's modules) and through the classes of its own module."""
    found = []
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id in classes:
            found += _library_bases(classes[base.id], bound, classes)
            continue
        dotted = _dotted(base, bound)
        value = dotted and _resolve(dotted)
        if inspect.isclass(value):
            found += [k for k in value.__mro__ if _library(k.__module__)]
    return found


@functools.cache
def _private_names_of(library_class: type) -> frozenset[str]:
    """The private names a library class has or sets on its instances."""
    names = {name for name in vars(library_class) if _is_private(name)}
    try:
        source = inspect.getsource(library_class)
    except (OSError, TypeError):
        return frozenset(names)
    return frozenset(names | {n for n in _assigned_names(ast.parse(source)) if _is_private(n)})


def _calls_super_init(function: ast.FunctionDef) -> bool:
    return any(
        isinstance(node, ast.Attribute)
        and node.attr == "__init__"
        and isinstance(node.ctx, ast.Load)
        for node in ast.walk(function)
    )


def _findings(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text())
    bound = _imports(tree)
    library_names = _library_private_names()
    ours = _our_names()
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    found = []

    def note(node, what):
        found.append(f"{where}:{node.lineno}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom) and not getattr(node, "level", 0):
            modules = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
            )
            for module in modules:
                if _library(module) and not _public_module(module):
                    note(node, f"imports {module}, undocumented in {_library(module)}")
            if isinstance(node, ast.ImportFrom) and _library(node.module):
                for alias in node.names:
                    if _is_private(alias.name):
                        note(node, f"imports {node.module}.{alias.name}")
        elif isinstance(node, ast.Attribute):
            name = node.attr
            if not (_is_private(name) or name in library_names):
                continue
            dotted = _dotted(node.value, bound)
            if dotted and _library(dotted):
                note(node, f"{ast.unparse(node)}: {_library(dotted)}'s private {name}")
            elif name in library_names and name not in ours:
                note(node, f"{ast.unparse(node)}: a library's private {name}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name | ast.Attribute)
            and getattr(node.func, "id", getattr(node.func, "attr", None))
            in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in library_names
            and node.args[1].value not in ours
        ):
            note(node, f"{ast.unparse(node.func)} of a library's private {node.args[1].value}")

    classes = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    for cls in classes.values():
        library_classes = _library_bases(cls, bound, classes)
        if not library_classes:
            continue
        private = frozenset().union(*map(_private_names_of, library_classes))
        for node in ast.walk(cls):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node in cls.body:
                if node.name in private:
                    note(node, f"{cls.name} overrides {node.name}, private to its library base")
                if node.name == "__init__" and not _calls_super_init(node):
                    note(node, f"{cls.name} replaces its library base's __init__ without it")
            elif isinstance(node, ast.Attribute) and node.attr in private:
                note(node, f"{cls.name} reaches its library base's private {node.attr}")
    return found


def test_no_private_library_name_is_used_outside_shopapi_internals():
    findings = [finding for path in _sources() for finding in _findings(path)]
    assert findings == [], "move each into shopapi/internals/<library>.py:\n" + "\n".join(findings)


def test_the_scan_finds_each_kind_of_private_use(tmp_path):
    """The scan itself, on code that does each of what it must find."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import peewee\n"
        "from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol\n"
        "from connexion.spec import Specification\n"
        "from connexion.uri_parsing import OpenAPIURIParser\n"
        "Specification._validate_spec = None\n"
        "def rows(lines):\n"
        "    return [line.__data__ for line in lines]\n"
        "class Parser(OpenAPIURIParser):\n"
        "    def __init__(self, param_defns, body_defn):\n"
        "        self._param_defns = param_defns\n"
        "    def _resolve_param_duplicates(self, values, param_defn, _in):\n"
        "        return values\n"
        "def pool(db):\n"
        "    return db._adapter\n"
    )
    findings = "\n".join(_findings(sample))
    for expected in (
        ":2: imports uvicorn.protocols.http.httptools_impl, undocumented in uvicorn",
        ":3: imports connexion.spec, undocumented in connexion",
        ":5: Specification._validate_spec: connexion's private _validate_spec",
        ":7: line.__data__: a library's private __data__",
        ":9: Parser replaces its library base's __init__ without it",
        ":10: Parser reaches its library base's private _param_defns",
        ":11: Parser overrides _resolve_param_duplicates, private to its library base",
        ":14: db._adapter: a library's private _adapter",
    ):
        assert expected in findings, expected
