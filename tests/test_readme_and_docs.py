"""The README stays a front door and the documentation stays true to the code: every relative
link in README.md and docs/ reaches a file and heading that exist, every setting is in
docs/configuration.md, and what the README states of the defaults is what the code does."""

import dataclasses
import re
from pathlib import Path

import pytest
from support.live import ROOT

from models import demo
from shopapi.settings import Settings

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
FIRST_SCREEN = 40

FENCE = re.compile(r"^(```|~~~)")
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def _prose(page: Path) -> list[str]:
    """The page's lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in page.read_text().splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def _anchors(page: Path) -> set[str]:
    """The fragments GitHub gives the page's headings: lower-cased, punctuation dropped, spaces
    as hyphens, a repeated one numbered."""
    anchors: set[str] = set()
    for line in _prose(page):
        heading = HEADING.match(line)
        if heading:
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1)).replace("`", "")
            slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
            anchor, n = slug, 0
            while anchor in anchors:
                n += 1
                anchor = f"{slug}-{n}"
            anchors.add(anchor)
    return anchors


def _relative_links(page: Path) -> list[str]:
    return [
        target
        for line in _prose(page)
        for target in LINK.findall(INLINE_CODE.sub("", line))
        if not re.match(r"[a-z][a-z0-9+.-]*:", target)
    ]


def _reaches(page: Path, target: str) -> bool:
    path, _, fragment = target.partition("#")
    file = (page.parent / path).resolve() if path else page
    if not file.exists():
        return False
    return not fragment or file.suffix != ".md" or fragment in _anchors(file)


def test_the_readme_is_a_front_door():
    lines = README.read_text().splitlines()
    assert len(lines) <= 250
    first_screen = "\n".join(lines[:FIRST_SCREEN])
    for wanted in ("PORT=8001 make run", "http://127.0.0.1:8000/v1/ui/", "make test"):
        assert wanted in first_screen, wanted


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_heading(page):
    assert [target for target in _relative_links(page) if not _reaches(page, target)] == []


def test_every_setting_is_in_the_configuration_page():
    table = (ROOT / "docs" / "configuration.md").read_text()
    variables = [
        field.metadata["variable"]
        for field in dataclasses.fields(Settings)
        if "variable" in field.metadata
    ]
    assert len(variables) > 40
    assert [v for v in variables if f"`{v}`" not in table] == []


def test_the_configuration_page_notes_each_old_name_as_deprecated_beside_its_new_one():
    rows = (ROOT / "docs" / "configuration.md").read_text().splitlines()
    renamed = [
        (old, field.metadata["variable"])
        for field in dataclasses.fields(Settings)
        for old in field.metadata.get("formerly", ())
    ]
    assert len(renamed) >= 7
    variables = [row.split(" | ")[0] for row in rows if row.startswith("| `")]
    for old, new in renamed:
        cell = next(cell for cell in variables if f"`{new}`" in cell)
        formerly = cell[cell.index("(formerly ") :].split(": deprecated)")[0]
        assert f"`{old}`" in formerly, cell


def test_the_readme_states_the_defaults_the_code_has():
    text = README.read_text()
    minutes = Settings.access_token_ttl // 60
    assert f"it lasts {minutes} minutes" in text
    assert "`HOST`, `PORT` | `127.0.0.1`, `8000`" in text
    # tests/test_demo_accounts.py relies on the README publishing the demo accounts' passwords.
    for account in demo.ACCOUNTS:
        assert f"`{account['email']}` | `{account['password']}`" in text


def test_the_readme_keeps_the_block_ci_runs_as_a_newcomer():
    text = README.read_text()
    marker = text.index("<!-- example: first-requests")
    block = text[marker:].split("```sh\n", 1)[1].split("\n```", 1)[0]
    assert "$API/oauth/token" in block and "password=admin-pass" in block
    # Every answer printed ends with a newline, so none runs into the next or the prompt.
    printed = [line for line in block.splitlines() if line.startswith("curl ")]
    assert printed and all("-w '\\n'" in line for line in printed)
