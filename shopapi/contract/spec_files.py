"""Loads a spec file that takes parts from others (spec/components.yaml, what the versions share;
spec/v2.yaml from spec/openapi.yaml) as one self-contained document: bundled, not dereferenced.
The rules: docs/contract.md."""

import copy
import functools
import pathlib

import yaml

# libyaml's parser, when PyYAML has it (its wheels do): the pure-Python one is much slower, on
# every start (bench/results/design-measurements.md).
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# The extension by which a spec replaces components of the files it takes from.
REPLACES = "x-replaces-components"
# Where the spec files are: spec/, beside the packages (in site-packages once installed).
SPEC_DIR = pathlib.Path(__file__).resolve().parents[2] / "spec"
# The API versions served, each from its spec file in spec/.
SPEC_FILES = {1: "openapi.yaml", 2: "v2.yaml", 3: "v3.yaml"}


def load(path: pathlib.Path) -> dict:
    """The spec in `path`, with what it takes from other files brought in: a copy of its own,
    since Connexion and the list language write into a spec."""
    return copy.deepcopy(_bundled(path))


@functools.cache  # bounded: one entry per spec file
def _bundled(path: pathlib.Path) -> dict:
    return _Bundle(path).spec


def _parse(path: pathlib.Path) -> dict:
    return yaml.load(path.read_text(), Loader=_Loader)  # noqa: S506 (a safe loader)


@functools.cache  # bounded: one entry per spec file
def _parsed(path: pathlib.Path) -> dict:
    """A file other specs take parts from, parsed once a process (v3 takes from v2, v2 from v1,
    all from components.yaml): only read, since what is taken from it is copied."""
    return _parse(path)


def _pointer_parts(pointer: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in pointer.lstrip("/").split("/")]


class _Bundle:
    def __init__(self, path: pathlib.Path):
        self.directory = path.parent
        spec = _parse(path)
        # Components of the files this spec takes from that its own same-named ones stand for,
        # wherever the parts it takes refer to them: `{parameters: [Prefer]}`.
        self.replaced = {
            (kind, name) for kind, names in spec.pop(REPLACES, {}).items() for name in names
        }
        self.components = spec.setdefault("components", {})
        # This spec's components that are another file's (`Problem: {$ref: 'components.yaml#…'}`).
        for kind in list(self.components):
            for name, entry in list(self.components[kind].items()):
                if _is_external(entry):
                    local = self._reference(entry["$ref"], source=None)
                    if local["$ref"] != f"#/components/{kind}/{name}":
                        self.components[kind][name] = local
        for key in spec:
            if key != "components":
                spec[key] = self._walk(spec[key], source=None)
        # Walking a component may bring in others, to be walked in turn.
        walked = set()
        while pending := [
            (kind, name)
            for kind, entries in self.components.items()
            for name in entries
            if (kind, name) not in walked
        ]:
            for kind, name in pending:
                self.components[kind][name] = self._walk(self.components[kind][name], None)
                walked.add((kind, name))
        _drop_links_to_absent_operations(spec)
        self.spec = spec

    def _document(self, file: str) -> dict:
        return _parsed(self.directory / file)

    def _target(self, file: str, pointer: str):
        node = self._document(file)
        for part in _pointer_parts(pointer):
            node = node[part]
        return copy.deepcopy(node)

    def _walk(self, node, source: str | None):
        """`node` with its references into other files brought in; `source` is the file it
        came from (None: this spec), which its own `#/...` references point into."""
        if isinstance(node, list):
            return [self._walk(item, source) for item in node]
        if not isinstance(node, dict):
            return node
        reference = node.get("$ref")
        if isinstance(reference, str) and (source or not reference.startswith("#")):
            return self._reference(reference, source)
        return {key: self._walk(value, source) for key, value in node.items()}

    def _reference(self, reference: str, source: str | None) -> dict:
        file, _, pointer = reference.partition("#")
        file = file or source
        parts = _pointer_parts(pointer)
        if len(parts) != 3 or parts[0] != "components":
            return self._walk(self._target(file, pointer), file)
        _, kind, name = parts
        local = {"$ref": f"#/components/{kind}/{name}"}
        if (kind, name) in self.replaced:
            return local
        content = self._walk(self._target(file, pointer), file)
        if content == local:
            # A component that is another file's of the same name (v2's `page` is components.yaml's,
            # which v3 takes through v2): the one already brought in.
            return local
        entries = self.components.setdefault(kind, {})
        existing = entries.get(name)
        # Absent, or this spec's own entry referring to the very same component: bring it in.
        if existing is None or existing == {"$ref": f"{file}#{pointer}"}:
            entries[name] = content
        elif existing != content:
            raise ValueError(
                f"{file}#{pointer} is referred to, but this spec has another "
                f"components/{kind}/{name}"
            )
        return local


def _is_external(node) -> bool:
    return isinstance(node, dict) and not node.get("$ref", "#").startswith("#")


def _drop_links_to_absent_operations(spec: dict) -> None:
    """A path item taken from another file keeps its responses' links only to operations this
    spec has: v3 takes v1's `POST /users`, whose 201 links to `list_user_orders`, which v3 does
    not serve (a link to no operation stops a tool that follows links, such as schemathesis)."""
    operation_ids = {
        operation.get("operationId")
        for item in spec.get("paths", {}).values()
        for operation in item.values()
        if isinstance(operation, dict)
    }
    for item in spec.get("paths", {}).values():
        for operation in item.values():
            if not isinstance(operation, dict):
                continue
            for response in operation.get("responses", {}).values():
                links = response.get("links")
                if not links:
                    continue
                for name in [n for n, link in links.items() if "operationId" in link]:
                    if links[name]["operationId"] not in operation_ids:
                        del links[name]
