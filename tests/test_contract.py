"""Contract fuzzing: schemathesis drives a live server (checking every response against the
contract itself too) through all its phases: examples, coverage, fuzzing and stateful runs along
the spec's links, once with a bearer token and once with an API key, both an admin's. Its
settings and the adjusted checks are in schemathesis.toml."""

import os
import pathlib
import subprocess
import sys

import pytest
from helpers import bearer, create_user
from live import ROOT, live_server

from models.user import SCOPES

pytestmark = pytest.mark.slow

SCHEMATHESIS = pathlib.Path(sys.executable).parent / "schemathesis"


def _api_key_credentials(client) -> tuple[str, dict]:
    """An admin's key, and the ids the fuzzer must leave alone (tests/schemathesis_hooks.py):
    deleting or demoting its owner, or revoking it, would end the run's credentials."""
    owner = create_user(client, role="admin")
    key = client.post(
        "/v1/api-keys", json={"name": "fuzzer", "scopes": list(SCOPES), "owner_id": owner["id"]}
    ).json()
    protected = {"FUZZ_PROTECTED_USER": str(owner["id"]), "FUZZ_PROTECTED_API_KEY": str(key["id"])}
    return f"X-API-Key: {key['key']}", protected


@pytest.mark.parametrize("scheme", ["bearer", "api_key"])
def test_schemathesis_finds_no_failure(client, database_url, scheme):
    if scheme == "bearer":
        header, protected = f"Authorization: {bearer()['Authorization']}", {}
    else:
        header, protected = _api_key_credentials(client)
    with live_server(database_url, VALIDATE_RESPONSES="1") as base:
        run = subprocess.run(
            [
                str(SCHEMATHESIS),
                "--config-file",
                str(ROOT / "schemathesis.toml"),
                "run",
                f"{base}/v1/openapi.json",
                "--header",
                header,
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
            env={**os.environ, **protected},
        )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "No issues found" in run.stdout, run.stdout[-4000:]
