"""The contract is read in one place: shopapi/contract/operations.py walks a spec's paths and
components, follows its `$ref`s and works out its base path; everything else (probes, ETag
rules, allowed methods, security, the list language) takes what it needs from there. So a new
`x-` extension is read in that one module (docs/contract.md says how)."""

import ast

from support.live import ROOT

# The one reader, and the loader that bundles the spec files (it writes references across
# files before anything reads the spec).
READERS = {"shopapi/contract/operations.py", "shopapi/contract/spec_files.py"}
# The keys of an OpenAPI document that only the reader indexes.
STRUCTURE = {"paths", "components", "servers", "$ref"}


def _sources():
    for path in sorted([ROOT / "app.py", *(ROOT / "shopapi").rglob("*.py")]):
        name = path.relative_to(ROOT).as_posix()
        if name not in READERS:
            yield name, ast.parse(path.read_text(), filename=name)


def _reads_structure(node: ast.AST) -> str | None:
    """The key, when `node` indexes an OpenAPI document by it: `spec["paths"]`,
    `spec.get("servers")`, `spec.setdefault("components")`, `"$ref" in node`."""
    key = None
    if isinstance(node, ast.Subscript):
        key = node.slice
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr in ("get", "setdefault", "pop") and node.args:
            key = node.args[0]
    elif isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.In, ast.NotIn)):
        key = node.left
    if isinstance(key, ast.Constant) and key.value in STRUCTURE:
        return key.value
    return None


def test_only_the_reader_walks_the_spec():
    found = [
        f"{name}:{node.lineno} reads {key!r}"
        for name, tree in _sources()
        for node in ast.walk(tree)
        if (key := _reads_structure(node))
    ]
    assert found == [], "read these from shopapi.contract.operations instead"


def test_the_guard_sees_each_way_of_reading():
    # The guard itself: each form it must catch, and what it must let be (writing a reference).
    caught = [
        'spec["paths"]',
        'spec.get("servers", [{}])',
        'spec["components"].setdefault("parameters", {})',
        'spec.setdefault("components", {})',
        '"$ref" in node',
    ]
    for source in caught:
        assert any(map(_reads_structure, ast.walk(ast.parse(source)))), source
    let_be = ['{"$ref": "#/components/parameters/cursor"}', 'headers.get("ETag")']
    for source in let_be:
        assert not any(map(_reads_structure, ast.walk(ast.parse(source)))), source


def test_contract_and_web_do_not_import_each_other():
    # contract/ wraps handlers with web/'s ETags and representations (resolver.py) and raises
    # web/'s problems; web/ is given what it needs of the contract by app.py.
    imports = [
        f"{name} imports {module}"
        for name, tree in _sources()
        if name.startswith("shopapi/web/")
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for module in (
            [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else [alias.name for alias in node.names]
        )
        if module.startswith("shopapi.contract")
    ]
    assert imports == []
