"""The Postman collection we ship (docs/postman/shopapi-v3.postman_collection.json): the one
tests/support/postman_collection.py makes from the served v3 contract, with no read-only field
in a body, and run green by newman (pinned in tests/contract_tools) against a fresh server with
`make run`'s demo data. Without node or the tools the tests skip, except in CI."""

import json
import os
import re
import shutil
import subprocess

import httpx
import pytest
from support.contract_walk import follow_ref
from support.live import ROOT, live_server
from support.postman_collection import (
    COLLECTION,
    CONVERTER,
    RUN,
    collection,
    read_only_fields,
    served,
    text,
)

from models import seed

NEWMAN = ROOT / "tests" / "contract_tools" / "node_modules" / ".bin" / "newman"
REQUESTS = sum(len(operation_ids) for _, operation_ids in RUN)


def _tools(*tools):
    missing = [tool.name for tool in tools if not tool.exists()]
    if shutil.which("node") is None or missing:
        reason = f"node or {', '.join(missing) or 'its tools'} missing: run `make contract-tools`"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI must run the Postman collection", pytrace=False)
        pytest.skip(reason)


def _shipped() -> dict:
    return json.loads(COLLECTION.read_text())


def _requests(shipped: dict) -> list[dict]:
    return [item["request"] for folder in shipped["item"] for item in folder["item"]]


@pytest.mark.slow
def test_the_shipped_collection_is_the_one_made_from_the_served_contract():
    _tools(CONVERTER)
    assert COLLECTION.read_text() == text(collection()), (
        "the contract changed since the collection was made: `make postman-collection`"
    )


def test_no_body_of_the_collection_sends_a_read_only_field():
    """openapi-to-postmanv2 puts an order item's `unit_price` and expanded `product` in the body
    of `POST /orders` (the server refuses them); ours does not."""
    contract = served()
    operations = {
        (method.upper(), path): operation
        for path, item in contract["paths"].items()
        for method, operation in item.items()
        if isinstance(operation, dict) and "responses" in operation
    }
    checked = 0
    for request in _requests(_shipped()):
        if request.get("body", {}).get("mode") != "raw":
            continue
        path = "/" + "/".join(
            "{" + part[1:] + "}" if part.startswith(":") else part
            for part in request["url"]["path"]
        )
        content = follow_ref(contract, operations[request["method"], path]["requestBody"])
        schema = content["content"]["application/json"]["schema"]
        body = json.loads(re.sub(r"\{\{\w+\}\}", "0", request["body"]["raw"]))  # ids: numbers
        assert read_only_fields(contract, schema, body) == [], (request["method"], path)
        checked += 1
    assert checked >= 15


@pytest.mark.slow
def test_newman_runs_every_request_of_the_collection_green(app, database_url, tmp_path):
    if not database_url.startswith("sqlite"):
        pytest.skip("run against `make run`'s database, SQLite (the API is the same on both)")
    _tools(NEWMAN)
    assert seed.seed()  # a fresh `make run`: the demo data and accounts
    report = tmp_path / "newman.json"
    with live_server(database_url) as base:
        assert httpx.get(f"{base}/v3/openapi.json").json() == served()
        run = subprocess.run(
            [
                str(NEWMAN),
                "run",
                str(COLLECTION),
                "--env-var",
                f"baseUrl={base}/v3",
                "--reporters",
                "cli,json",
                "--reporter-json-export",
                str(report),
                "--color",
                "off",
                "--disable-unicode",
                "--timeout-request",
                "30000",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "NO_COLOR": "1"},
        )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    stats = json.loads(report.read_text())["run"]["stats"]
    assert stats["requests"] == {"total": REQUESTS, "pending": 0, "failed": 0}, stats
    assert stats["assertions"] == {"total": REQUESTS, "pending": 0, "failed": 0}, stats
    assert stats["testScripts"]["failed"] == 0, stats
    assert f"{REQUESTS} requests" in (ROOT / "docs" / "clients.md").read_text()
