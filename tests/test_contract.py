"""Contract fuzzing: schemathesis drives a live server (checking every response against the
contract itself too) through all its phases: examples, coverage, fuzzing and stateful runs along
the spec's links, once with a bearer token and once with an API key, both an admin's. Its
settings and the adjusted checks are in schemathesis.toml."""

import os
import pathlib
import re
import subprocess
import sys

import httpx
import pytest
from hypothesis import settings
from support.helpers import VAPID, bearer_for, create_user
from support.live import ROOT, live_server

from models import seed
from models.user import SCOPES

# Each run takes minutes: `make test-deep` runs them, side by side (docs/testing.md).
pytestmark = [pytest.mark.slow, pytest.mark.deep]

SCHEMATHESIS = pathlib.Path(sys.executable).parent / "schemathesis"


def _credentials(client, scheme: str) -> tuple[str, dict]:
    """An admin's bearer token or API key, and the ids the fuzzer must leave alone
    (tests/support/schemathesis_hooks.py): deleting or demoting the admin, or revoking the key,
    would end the run's credentials."""
    # The spec's examples name user 1: let that be one the fuzzer may delete, not its admin.
    create_user(client)
    admin = create_user(client, role="admin")
    protected = {"FUZZ_PROTECTED_USER": str(admin["id"])}
    if scheme == "bearer":
        return f"Authorization: {bearer_for(admin)['Authorization']}", protected
    key = client.post(
        "/v1/api-keys", json={"name": "fuzzer", "scopes": list(SCOPES), "owner_id": admin["id"]}
    ).json()
    return f"X-API-Key: {key['key']}", {**protected, "FUZZ_PROTECTED_API_KEY": str(key["id"])}


# Each version is fuzzed in depth with a bearer token, its phases shared between the databases:
# the examples and the coverage phase (boundary values of every parameter, the costliest)
# against PostgreSQL, the production database; the fuzzing and stateful runs against SQLite.
# What each probes is the contract and its validation, the same on both; the suite's other
# tests cover both databases. The API-key run proves the other scheme end to end (every
# operation, ignored_auth, the stateful links) without repeating the bearer run's bodies.
PHASES = {
    ("v1", "bearer", "postgresql"): "examples,coverage",
    ("v1", "bearer", "sqlite"): "examples,fuzzing,stateful",
    ("v1", "api_key", "postgresql"): "examples,stateful",
    ("v1", "api_key", "sqlite"): "examples,stateful",
    ("v2", "bearer", "postgresql"): "examples,coverage",
    ("v2", "bearer", "sqlite"): "examples,fuzzing,stateful",
    ("v3", "bearer", "postgresql"): "examples,coverage",
    ("v3", "bearer", "sqlite"): "examples,fuzzing,stateful",
}
# Every run keeps its phases and operations; its depth follows the Hypothesis profile
# (tests/conftest.py). In CI (the `ci` profile) 50 cases an operation and every case of the coverage
# phase; by default 10, and of the coverage phase's cases each operation's first of each kind on
# each parameter (a wrong type for `price_cents`, ...): a sixth of them
# (tests/support/schemathesis_hooks.py).
DEPTH = {"ci": ("50", "all"), "dev": ("10", "first-of-each-kind")}
RUNS = sorted({(version, scheme) for version, scheme, _ in PHASES})
# v2 differs from v1 only on the paths with money; its other path items are v1's, by $ref
# (spec/v2.yaml), served by the same handlers, and fuzzed in the v1 runs. v3 differs from v2 on
# products (the batch) and orders (`expand`); its other lists differ only in what they count.
ONLY = {"v2": r"^/(products|orders|users/\{id\}/orders)", "v3": r"^/(products|orders)"}
# What a run may warn about: operations whose valid requests need stored data that no schema
# can hold (a password or client secret; existing user, product and event ids); an order's own
# operations, which need one placed within the run (with existing products in stock), and
# deleting one, which also needs it cancelled (tests/test_orders.py covers them); a
# webhook's deliveries, which need an event the webhook takes (tests/test_webhooks.py covers
# them); and a device's own operations, which need one registered within the run for an
# existing user (tests/test_devices.py covers them). And a product replaced with money in an
# object: `Money` has one decimal pattern for every currency, so that client tools can fill it,
# and the server refuses (422) an amount with more decimals than its currency has, which most
# generated pairs have (tests/test_versions.py covers every currency's bounds).
EXPECTED_WARNINGS = {
    "Schema validation mismatch": {
        "PUT /products/{id}",
        "POST /oauth/token",
        "POST /orders",
        "POST /api-keys",
        "POST /webhooks/{webhook_id}/deliveries",
    },
    "Missing test data": {
        "GET /orders/{id}",
        "PUT /orders/{id}",
        "PATCH /orders/{id}",
        "DELETE /orders/{id}",
        "POST /webhooks/{webhook_id}/deliveries",
        "GET /webhooks/{webhook_id}/deliveries/{id}",
        "GET /users/{user_id}/devices/{id}",
        "DELETE /users/{user_id}/devices/{id}",
        "GET /users/{user_id}/devices/{device_id}/deliveries",
    },
}


@pytest.mark.parametrize(("version", "scheme"), RUNS)
def test_schemathesis_finds_no_failure(client, database_url, version, scheme, tmp_path):
    vapid_key_file = tmp_path / "vapid.pem"
    vapid_key_file.write_text(VAPID["vapid_private_key"])
    phases = PHASES[version, scheme, database_url.partition(":")[0]]
    header, protected = _credentials(client, scheme)
    only = ["--include-path-regex", ONLY[version]] if version in ONLY else []
    max_examples, coverage = DEPTH[settings.get_current_profile_name()]
    web_push = {
        "VAPID_PRIVATE_KEY_FILE": str(vapid_key_file),
        "VAPID_SUBJECT": VAPID["vapid_subject"],
    }
    with live_server(database_url, VALIDATE_RESPONSES="1", **web_push) as base:
        run = subprocess.run(
            [
                str(SCHEMATHESIS),
                "--config-file",
                str(ROOT / "schemathesis.toml"),
                "run",
                f"{base}/{version}/openapi.json",
                "--header",
                header,
                "--checks",
                "all",
                "--phases",
                phases,
                "--max-examples",
                max_examples,
                "--seed",
                "1",
                "--no-color",
                *only,
            ],
            capture_output=True,
            text=True,
            timeout=3600,  # a hung run's guard: a deep run on a busy machine takes many minutes
            cwd=ROOT,
            env={**os.environ, **protected, "FUZZ_COVERAGE": coverage},
        )
    # The failures, not the tail of a long report (which a long reproducing URL can fill).
    report = run.stdout[max(run.stdout.find("= FAILURES ="), 0) :]
    assert run.returncode == 0, report[:12000] + run.stderr[-2000:]
    assert "Failures:" not in run.stdout, run.stdout[-4000:]
    if "fuzzing" not in phases:
        return  # too few requests per operation for its data warnings to mean much
    # Two kinds of warning are expected, each for the operations whose valid requests need
    # stored data no schema can hold. Any other warning, or operation, is a finding.
    warnings = _warnings(run.stdout)
    assert bool(warnings) == ("Warnings:" in run.stdout), run.stdout[-4000:]  # parsed them all
    for kind, operations in warnings.items():
        assert kind in EXPECTED_WARNINGS, run.stdout[-4000:]
        assert operations <= EXPECTED_WARNINGS[kind], run.stdout[-4000:]


def _warnings(stdout: str) -> dict[str, set[str]]:
    """Each warning of a run (its kind: "Missing test data", ...) with the operations it names."""
    block = stdout.partition(" WARNINGS =")[2].partition(" SUMMARY =")[0]
    warnings, kind = {}, None
    for line in block.splitlines():
        if operation := re.fullmatch(r"  - (\w+ \S+)", line):
            warnings[kind].add(operation[1])
        elif re.match(r"[A-Z][\w ]+: ", line):
            kind = line.partition(":")[0]
            warnings[kind] = set()
    return warnings


def _outside_config() -> str:
    """The schemathesis.toml docs/clients.md gives a user who fuzzes a server from outside."""
    docs = (ROOT / "docs" / "clients.md").read_text()
    marker = "<!-- example: outside-fuzzing-config"
    return docs.partition(marker)[2].partition("```toml\n")[2].partition("```")[0]


def _fuzzer_key(api: str) -> str:
    """The steps docs/clients.md gives: the demo admin makes a customer and its API key."""
    token = httpx.post(
        f"{api}/oauth/token",
        data={"grant_type": "password", "username": "admin@example.com", "password": "admin-pass"},
    ).json()["access_token"]
    admin = {"Authorization": f"Bearer {token}"}
    account = {"email": "fuzzer@example.com", "name": "Fuzzer", "password": "fuzzer-password"}
    fuzzer = httpx.post(f"{api}/users", json=account, headers=admin).json()
    scopes = ["users:read", "users:write", "products:read", "orders:read", "orders:write"]
    key = {"name": "fuzzer", "owner_id": fuzzer["id"], "scopes": scopes}
    return httpx.post(f"{api}/api-keys", json=key, headers=admin).json()["key"]


# Each version fuzzed from outside once, on one database: what it probes is the documents and
# the account's rights, the same on both (the runs above cover the databases).
OUTSIDE = {1: "sqlite", 2: "postgresql", 3: "sqlite"}


@pytest.mark.parametrize("version", sorted(OUTSIDE))
def test_schemathesis_from_outside_as_the_docs_say(app, database_url, version, tmp_path):
    """The whole served document, links and all, by the CLI alone: no hooks, nothing of the
    project's imported; a few cases an operation (a hand run of thousands is in the CHANGELOG)."""
    if database_url.partition(":")[0] != OUTSIDE[version]:
        pytest.skip(f"v{version} is fuzzed from outside on {OUTSIDE[version]}")
    assert seed.seed()  # a fresh `make run`: the demo data and accounts
    (tmp_path / "schemathesis.toml").write_text(_outside_config())
    with live_server(database_url) as base:
        api = f"{base}/v{version}"
        key = _fuzzer_key(api)
        run = subprocess.run(
            [
                str(SCHEMATHESIS),
                "--config-file",
                str(tmp_path / "schemathesis.toml"),
                "run",
                f"{api}/openapi.json",
                "--checks",
                "all",
                "--phases",
                "examples,fuzzing,stateful",
                "--max-examples",
                "5",
                "--seed",
                "1",
                "--no-color",
            ],
            capture_output=True,
            text=True,
            timeout=900,
            cwd=tmp_path,  # away from the repository's schemathesis.toml and its hooks
            env={**os.environ, "SHOPAPI_FUZZ_KEY": key},
        )
    report = run.stdout[max(run.stdout.find("= FAILURES ="), 0) :]
    assert run.returncode == 0, report[:12000] + run.stderr[-2000:]
    assert "Failures:" not in run.stdout, report[:12000]
    assert "Server error" not in run.stdout, report[:12000]
    # The stateful phase ran: links that lead nowhere would stop it before it starts.
    assert re.search(r"✅\s+Stateful", run.stdout), run.stdout[-4000:]
