"""One release number: the package's version, the root contracts' `info.version` and the newest
entry of CHANGELOG.md are the same; each API version's contract has a number of its own, which
the changelog names; the licence the package declares is the one shipped."""

import configparser
import importlib.metadata
import re

import pytest
import yaml
from support.contract_walk import follow_ref
from support.live import ROOT

SETUP = configparser.ConfigParser()
SETUP.read(ROOT / "setup.cfg")
RELEASE = SETUP["metadata"]["version"]


def test_the_installed_package_is_this_release():
    assert importlib.metadata.version("shopapi") == RELEASE


@pytest.mark.parametrize("version", [1, 2, 3])
def test_every_served_contract_has_its_apis_own_version(anonymous, version):
    # `3.y.z` for /v3, not the package's number: a client generated from it says which API.
    number = anonymous.get(f"/v{version}/openapi.json").json()["info"]["version"]
    assert re.fullmatch(rf"{version}\.\d+\.\d+", number)
    # The changelog says what each number brought.
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"v{version} {number}" in changelog


@pytest.mark.parametrize("name", ["well-known.yaml", "metrics.yaml", "components.yaml"])
def test_the_root_contracts_name_this_release(name):
    assert yaml.safe_load((ROOT / "spec" / name).read_text())["info"]["version"] == RELEASE


def test_the_changelog_starts_with_this_release():
    changelog = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## (\d+\.\d+\.\d+) — \d{4}-\d\d-\d\d$", changelog, re.MULTILINE)
    assert releases[0] == RELEASE
    # Newest first, each number once.
    as_tuples = [tuple(map(int, release.split("."))) for release in releases]
    assert as_tuples == sorted(set(as_tuples), reverse=True)


# The resources' schemas, whose fields a version may add to those of the version before.
RESOURCES = ("ProductFields", "OrderFields", "OrderItem", "UserFields")


@pytest.mark.parametrize("version", [2, 3])
def test_every_field_a_version_adds_is_in_the_changelog(anonymous, version):
    """A field that a version shows beyond the version before (v2's `price`, v3's
    `weight_grams`) is named in CHANGELOG.md, in code: what a client of that version gains."""

    def fields(number: int) -> set[str]:
        contract = anonymous.get(f"/v{number}/openapi.json").json()
        schemas = contract["components"]["schemas"]
        return {
            name
            for resource in RESOURCES
            if resource in schemas
            for name in follow_ref(contract, schemas[resource]).get("properties", {})
        }

    changelog = (ROOT / "CHANGELOG.md").read_text()
    in_code = " ".join(re.findall(r"`[^`]+`", changelog))
    added = fields(version) - fields(version - 1)
    missing = sorted(name for name in added if not re.search(rf"\b{name}\b", in_code))
    assert missing == [], f"v{version} adds these fields: name them in CHANGELOG.md"


def test_the_declared_licence_is_shipped():
    assert SETUP["metadata"]["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
