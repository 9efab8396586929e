"""The contract and its docs UI are served by the app itself, with no CDN."""

import re

import yaml
from openapi_spec_validator import validate


def test_the_contract_is_served_as_json_and_yaml(client):
    as_json = client.get("/v1/openapi.json")
    as_yaml = client.get("/v1/openapi.yaml")
    assert as_json.status_code == 200 and as_yaml.status_code == 200
    contract = as_json.json()
    assert contract["openapi"].startswith("3.0")
    assert yaml.safe_load(as_yaml.text)["paths"].keys() == contract["paths"].keys()
    operations = {
        op["operationId"]
        for item in contract["paths"].values()
        for op in item.values()
        if isinstance(op, dict) and "operationId" in op
    }
    assert len(operations) == 38
    validate(contract)  # the served contract, list parameters expanded, is valid OpenAPI 3.0


def test_every_filter_is_a_parameter_of_the_served_contract(client):
    contract = client.get("/v1/openapi.json").json()
    names = {p["name"] for p in contract["paths"]["/products"]["get"]["parameters"]}
    assert {"price_cents", "price_cents[gte]", "name[contains]", "category[in]"} <= names
    assert {"active", "active[ne]", "sort", "fields", "cursor", "page", "per_page"} <= names
    assert "active[gt]" not in names and "price_cents[contains]" not in names
    users = {p["name"] for p in contract["paths"]["/users"]["get"]["parameters"]}
    assert not any(name.startswith("password") for name in users)


def test_swagger_ui_loads_every_asset_from_the_app(client):
    page = client.get("/v1/ui/")
    assert page.status_code == 200
    assert "openapi.json" in page.text
    assert not re.search(r"(?:src|href)=\"(?:https?:)?//", page.text)
    assets = re.findall(r"(?:src|href)=\"\./([^\"]+)\"", page.text)
    assert "swagger-ui-bundle.js" in assets
    for asset in assets:
        assert client.get(f"/v1/ui/{asset}").status_code == 200, asset
