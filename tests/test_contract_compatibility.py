"""v1, v2 and v3 never break: the contracts in spec/ still serve every client of the committed
snapshots (tests/contracts/); and the check is shown to catch each kind of breaking change, on
a temporary copy of the spec, while letting additions through."""

import json

import pytest
import yaml
from support.contract_compatibility import (
    SNAPSHOT,
    SOURCE,
    breaking_changes,
    served_contract,
    served_v1_contract,
    snapshot_of,
)


def test_the_v1_contract_keeps_everything_the_snapshot_promised():
    snapshot = json.loads(SNAPSHOT.read_text())
    assert breaking_changes(snapshot, served_v1_contract()) == []


@pytest.mark.parametrize("version", [1, 2, 3])
def test_each_version_keeps_everything_its_snapshot_promised(version):
    snapshot = json.loads(snapshot_of(version).read_text())
    assert breaking_changes(snapshot, served_contract(version)) == []


def _edited_copy(tmp_path, edit) -> dict:
    """The served contract of a temporary copy of spec/openapi.yaml changed by `edit`."""
    spec = yaml.safe_load(SOURCE.read_text())
    edit(spec)
    copy = tmp_path / "openapi.yaml"
    copy.write_text(yaml.safe_dump(spec, sort_keys=False))
    return served_v1_contract(copy)


def _schemas(spec):
    return spec["components"]["schemas"]


def _remove_operation(spec):
    del spec["paths"]["/products/{id}"]["delete"]


def _remove_response_field(spec):
    del _schemas(spec)["ProductFields"]["properties"]["currency"]


def _response_field_no_longer_required(spec):
    _schemas(spec)["Product"]["required"].remove("currency")


def _require_a_parameter(spec):
    parameters = spec["components"]["parameters"]
    parameters["per_page"]["required"] = True


def _remove_an_enum_value_clients_send(spec):
    status = _schemas(spec)["OrderStatus"]
    status["enum"].remove("cancelled")


def _restrict_a_pattern(spec):
    _schemas(spec)["ProductFields"]["properties"]["sku"]["pattern"] = "^[A-Z]{3,32}$"


def _narrow_a_bound(spec):
    _schemas(spec)["ProductFields"]["properties"]["name"]["maxLength"] = 10


def _new_required_body_field(spec):
    _schemas(spec)["ProductInput"]["required"].append("description")


def _drop_a_request_media_type(spec):
    body = spec["paths"]["/products/{id}"]["patch"]["requestBody"]["content"]
    del body["application/merge-patch+json"]


def _remove_a_success_status(spec):
    responses = spec["paths"]["/products"]["post"]["responses"]
    responses["200"] = responses.pop("201")


BREAKING = [
    (_remove_operation, "DELETE /products/{id}: removed"),
    (_remove_response_field, "currency: removed"),
    (_response_field_no_longer_required, "currency: no longer always present"),
    (_require_a_parameter, "parameter per_page: now required"),
    (_remove_an_enum_value_clients_send, "values cancelled no longer accepted"),
    (_narrow_a_bound, "maxLength lowered to 10"),
    (_restrict_a_pattern, "pattern changed"),
    (_new_required_body_field, "description: now required"),
    (_drop_a_request_media_type, "application/merge-patch+json no longer accepted"),
    (_remove_a_success_status, "response 201 removed"),
]


@pytest.mark.parametrize(("edit", "expected"), BREAKING, ids=[e.__name__ for e, _ in BREAKING])
def test_a_breaking_change_is_caught(tmp_path, edit, expected):
    problems = breaking_changes(served_v1_contract(), _edited_copy(tmp_path, edit))
    assert any(expected in problem for problem in problems), problems


def _additions(spec):
    spec["paths"]["/products/{id}/reviews"] = {
        "get": {"operationId": "list_reviews", "responses": {"200": {"description": "ok"}}}
    }
    _schemas(spec)["ProductFields"]["properties"]["rating"] = {"type": "number"}
    _schemas(spec)["ProductFields"]["properties"]["name"]["maxLength"] += 100
    spec["paths"]["/products"]["get"]["parameters"].append(
        {"name": "in_stock", "in": "query", "schema": {"type": "boolean"}}
    )


def test_additions_pass(tmp_path):
    assert breaking_changes(served_v1_contract(), _edited_copy(tmp_path, _additions)) == []
