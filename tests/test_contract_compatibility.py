"""v1, v2 and v3 never break: the contracts in spec/ still serve every client of the committed
snapshots (tests/contracts/); and the check is shown to catch each kind of breaking change, on
a temporary copy of the spec, while letting additions through."""

import json

import pytest
import yaml
from support.contract_compatibility import (
    SNAPSHOT,
    SPEC_DIR,
    breaking_changes,
    served_contract,
    snapshot_of,
)


def test_the_v1_contract_keeps_everything_the_snapshot_promised():
    snapshot = json.loads(SNAPSHOT.read_text())
    assert breaking_changes(snapshot, served_contract(1)) == []


@pytest.mark.parametrize("version", [1, 2, 3])
def test_each_version_keeps_everything_its_snapshot_promised(version):
    snapshot = json.loads(snapshot_of(version).read_text())
    assert breaking_changes(snapshot, served_contract(version)) == []


def _edited_spec(tmp_path, edit):
    """A temporary copy of spec/ changed by `edit`, which is given every file as plain YAML, by
    name, and changes the one where what it changes is written: a component the versions share
    in components.yaml, v1's own in openapi.yaml. Served from the copy, the change goes through
    the app's bundler as a designer's edit would."""
    files = {path.name: yaml.safe_load(path.read_text()) for path in SPEC_DIR.glob("*.yaml")}
    edit(files)
    for name, spec in files.items():
        (tmp_path / name).write_text(yaml.safe_dump(spec, sort_keys=False))
    return tmp_path


def _v1(files):
    return files["openapi.yaml"]


def _shared(files):
    return files["components.yaml"]


def _schemas(spec):
    return spec["components"]["schemas"]


def _remove_operation(files):
    del _v1(files)["paths"]["/products/{id}"]["delete"]


def _remove_response_field(files):
    del _schemas(_v1(files))["ProductFields"]["properties"]["currency"]


def _response_field_no_longer_required(files):
    _schemas(_v1(files))["Product"]["required"].remove("currency")


def _require_a_parameter(files):
    _shared(files)["components"]["parameters"]["per_page"]["required"] = True


def _remove_an_enum_value_clients_send(files):
    _schemas(_shared(files))["OrderStatus"]["enum"].remove("cancelled")


def _remove_a_shared_response_field(files):
    del _schemas(_shared(files))["UserFields"]["properties"]["email"]


def _restrict_a_pattern(files):
    _schemas(_v1(files))["ProductFields"]["properties"]["sku"]["pattern"] = "^[A-Z]{3,32}$"


def _narrow_a_bound(files):
    _schemas(_v1(files))["ProductFields"]["properties"]["name"]["maxLength"] = 10


def _new_required_body_field(files):
    _schemas(_v1(files))["ProductInput"]["required"].append("description")


def _drop_a_request_media_type(files):
    body = _v1(files)["paths"]["/products/{id}"]["patch"]["requestBody"]["content"]
    del body["application/merge-patch+json"]


def _remove_a_success_status(files):
    responses = _v1(files)["paths"]["/products"]["post"]["responses"]
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
    problems = breaking_changes(
        served_contract(1), served_contract(1, _edited_spec(tmp_path, edit))
    )
    assert any(expected in problem for problem in problems), problems


# Changes to components the three versions share, written once in components.yaml.
SHARED_BREAKING = [
    (_require_a_parameter, "parameter per_page: now required"),
    (_remove_an_enum_value_clients_send, "values cancelled no longer accepted"),
    (_remove_a_shared_response_field, "email: removed"),
]


@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize(
    ("edit", "expected"), SHARED_BREAKING, ids=[e.__name__ for e, _ in SHARED_BREAKING]
)
def test_a_breaking_change_to_a_shared_component_is_caught_in_every_version(
    tmp_path, edit, expected, version
):
    edited = served_contract(version, _edited_spec(tmp_path, edit))
    problems = breaking_changes(served_contract(version), edited)
    assert any(expected in problem for problem in problems), problems


def _additions(files):
    spec = _v1(files)
    spec["paths"]["/products/{id}/reviews"] = {
        "get": {"operationId": "list_reviews", "responses": {"200": {"description": "ok"}}}
    }
    _schemas(spec)["ProductFields"]["properties"]["rating"] = {"type": "number"}
    _schemas(spec)["ProductFields"]["properties"]["name"]["maxLength"] += 100
    spec["paths"]["/products"]["get"]["parameters"].append(
        {"name": "in_stock", "in": "query", "schema": {"type": "boolean"}}
    )


def test_additions_pass(tmp_path):
    edited = served_contract(1, _edited_spec(tmp_path, _additions))
    assert breaking_changes(served_contract(1), edited) == []
