"""What the versions of the contract share is written once, in spec/components.yaml: an edit
there shows in every served contract that takes the component, each still one document, and no
spec file writes out a component another already has."""

import itertools
import re
import shutil

import orjson
import pytest
import yaml

from app import SPEC_DIR
from shopapi.contract import served, spec_files
from shopapi.contract.list_language import with_list_language
from shopapi.contract.spec_files import SPEC_FILES

SHARED = "components.yaml"
# The files whose components/ a designer writes: the shared one and each version's.
WRITTEN = [SHARED, *SPEC_FILES.values()]


def _served(spec_dir) -> dict[int, dict]:
    """Each version's `/v{n}/openapi.json` as the app makes it from the files in `spec_dir`."""
    specs = {
        v: with_list_language(spec_files.load(spec_dir / name)) for v, name in SPEC_FILES.items()
    }
    documents = served.documents(list(specs.values()))
    return {v: orjson.loads(documents[f"/v{v}/openapi.json"].plain[0]) for v in specs}


def _is_reference(entry) -> bool:
    return isinstance(entry, dict) and set(entry) == {"$ref"}


def test_an_edit_to_a_shared_schema_shows_in_every_served_version(tmp_path):
    for name in WRITTEN:
        shutil.copy(SPEC_DIR / name, tmp_path / name)
    shared = tmp_path / SHARED
    text = shared.read_text()
    edited = "An RFC 9457 problem detail, edited once."
    assert text.count("description: An RFC 9457 problem detail.\n") == 1
    shared.write_text(text.replace("An RFC 9457 problem detail.", edited))

    before, after = _served(SPEC_DIR), _served(tmp_path)
    for version in SPEC_FILES:
        problem = after[version]["components"]["schemas"]["Problem"]
        assert problem["description"] == edited, version
        # Only that changed, and the document still refers to nothing outside itself.
        problem["description"] = before[version]["components"]["schemas"]["Problem"]["description"]
        assert after[version] == before[version], version
        refs = re.findall(r'"\$ref":"([^"]*)"', orjson.dumps(after[version]).decode())
        assert refs and all(ref.startswith("#/") for ref in refs), version


def _meaning(components: dict, entry) -> tuple:
    """An entry with every component it refers to, directly or not, as its file's bundle has
    them: two lists written alike mean different things when their items differ."""
    seen, pending = {}, [entry]
    while pending:
        node = pending.pop()
        if isinstance(node, list):
            pending += node
        elif isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/components/") and ref not in seen:
                _, _, kind, name = ref.split("/")
                seen[ref] = components[kind][name]
                pending.append(seen[ref])
            pending += node.values()
    return entry, seen


def test_no_spec_file_writes_out_a_component_another_already_has():
    """A component copied into a version file, rather than taken from components.yaml by $ref,
    would drift: two entries under components/ that mean the same, whatever their names, are
    refused."""
    written = []
    for name in WRITTEN:
        as_written = yaml.safe_load((SPEC_DIR / name).read_text())["components"]
        bundled = spec_files.load(SPEC_DIR / name)["components"]
        for kind, entries in as_written.items():
            written += [
                (f"{name}: {kind}/{component}", kind, _meaning(bundled, entry))
                for component, entry in entries.items()
                if not _is_reference(entry)
            ]
    copies = [
        (a[0], b[0]) for a, b in itertools.combinations(written, 2) if a[1] == b[1] and a[2] == b[2]
    ]
    assert copies == []


@pytest.mark.parametrize("name", SPEC_FILES.values())
def test_a_version_file_takes_shared_components_from_the_shared_file(name):
    """A version's $ref to another version's component is to one the shared file lacks (v3
    takes v2's money-carrying schemas); to a shared component it names components.yaml."""
    text = (SPEC_DIR / name).read_text()
    shared = yaml.safe_load((SPEC_DIR / SHARED).read_text())["components"]
    elsewhere = re.findall(r"'(openapi|v2|v3)\.yaml#/components/(\w+)/([^'/]+)'", text)
    assert [ref for ref in elsewhere if ref[2] in shared.get(ref[1], {})] == []


def test_every_shared_component_means_the_same_in_two_versions_or_more():
    """components.yaml holds only what is shared (the linters' unused-component rules are off
    for it: its components are used by the versions that take them)."""
    shared = spec_files.load(SPEC_DIR / SHARED)["components"]
    versions = [spec_files.load(SPEC_DIR / name)["components"] for name in SPEC_FILES.values()]
    alone = [
        f"{kind}/{name}"
        for kind, entries in shared.items()
        for name, entry in entries.items()
        if sum(version.get(kind, {}).get(name) == entry for version in versions) < 2
    ]
    assert alone == []
