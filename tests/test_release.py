"""One release number: the package's version, every served contract's `info.version` and the
newest entry of CHANGELOG.md are the same; the licence the package declares is the one shipped."""

import configparser
import importlib.metadata
import re

import pytest
import yaml
from support.live import ROOT

SETUP = configparser.ConfigParser()
SETUP.read(ROOT / "setup.cfg")
RELEASE = SETUP["metadata"]["version"]


def test_the_installed_package_is_this_release():
    assert importlib.metadata.version("shopapi") == RELEASE


@pytest.mark.parametrize("version", ["v1", "v2", "v3"])
def test_every_served_contract_names_this_release(anonymous, version):
    assert anonymous.get(f"/{version}/openapi.json").json()["info"]["version"] == RELEASE


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


def test_the_declared_licence_is_shipped():
    assert SETUP["metadata"]["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
