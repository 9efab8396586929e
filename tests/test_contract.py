"""Contract fuzzing: schemathesis drives a live server (checking every response against the
contract itself too) through all its phases: examples, coverage, fuzzing and stateful runs along
the spec's links. Its settings and the one adjusted check are in schemathesis.toml."""

import pathlib
import subprocess
import sys

import pytest
from live import ROOT, live_server

pytestmark = pytest.mark.slow

SCHEMATHESIS = pathlib.Path(sys.executable).parent / "schemathesis"


def test_schemathesis_finds_no_failure(app, database_url):
    with live_server(database_url, VALIDATE_RESPONSES="1") as base:
        run = subprocess.run(
            [
                str(SCHEMATHESIS),
                "--config-file",
                str(ROOT / "schemathesis.toml"),
                "run",
                f"{base}/v1/openapi.json",
                "--checks",
                "all",
                "--max-examples",
                "50",
                "--seed",
                "1",
                "--no-color",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=ROOT,
        )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "No issues found" in run.stdout
