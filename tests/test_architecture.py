"""docs/architecture.md states the rooms' dependency rules that `make lint` holds (lint-imports,
with the contracts in setup.cfg): the page and the configuration say the same."""

import configparser
import re

from support.live import ROOT

PAGE = (ROOT / "docs" / "architecture.md").read_text()
RULES = PAGE.split("## The dependencies", 1)[1].split("\n## ", 1)[0]
CONFIG = configparser.ConfigParser()
CONFIG.read(ROOT / "setup.cfg")
PREFIX = "importlinter:contract:"
CONTRACTS = {
    section.removeprefix(PREFIX): CONFIG[section]
    for section in CONFIG
    if section.startswith(PREFIX)
}


def test_the_page_names_each_contract_and_no_other():
    named = set(re.findall(r"^- \*\*[^*]+\*\* \(`([a-z-]+)`\)", RULES, re.MULTILINE))
    assert named == set(CONTRACTS)


def test_the_page_lists_the_rooms_layers_as_the_contract_does():
    block = RULES.split("```\n", 2)[1]
    # Each row's rooms are its first column; the rest (after three spaces or more) says why.
    rows = [line for line in block.splitlines() if line.strip() and not line.startswith("    ")]
    on_page = [re.split(" {3,}", row.strip())[0] for row in rows]
    in_config = [" ".join(row.split()) for row in CONTRACTS["rooms"]["layers"].splitlines() if row]
    assert on_page == in_config
