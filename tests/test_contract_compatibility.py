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


@pytest.mark.parametrize("version", [1, 2, 3])
def test_each_committed_snapshot_is_what_is_served(version):
    # An addition is committed with its snapshot (`make contract-snapshot`): a snapshot behind
    # the contract would let a later change take the addition away unnoticed.
    snapshot = json.loads(snapshot_of(version).read_text())
    assert snapshot == json.loads(json.dumps(served_contract(version))), (
        f"tests/contracts/v{version}.json is not what is served: make contract-snapshot"
    )


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


def _products_of(files):
    """The schemas of v2's products, and v3's where v3 has products of its own."""
    return [
        _schemas(spec)
        for spec in (files["v2.yaml"], files["v3.yaml"])
        if "properties" in _schemas(spec).get("ProductFields", {})
    ]


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


def _a_new_field_every_product_shows(files):
    for schemas in _products_of(files):
        schemas["ProductFields"]["properties"]["rating"] = {"type": "integer", "minimum": 0}
        schemas["Product"]["required"].append("rating")


@pytest.mark.parametrize("version", [2, 3])
def test_a_new_field_of_a_product_is_no_new_requirement_of_an_order(tmp_path, version):
    """v3's order items bring their product along (`expand`): a read-only field of the request
    body, which a client never sends, whatever the product it shows must have."""
    edited = served_contract(version, _edited_spec(tmp_path, _a_new_field_every_product_shows))
    assert breaking_changes(served_contract(version), edited) == []


@pytest.mark.parametrize("version", [2, 3])
def test_a_new_sortable_field_beside_dotted_ones_passes(tmp_path, version):
    """v2's and v3's `sort` and `fields` patterns name `price\\.amount`: a new field widens them."""
    edited_spec = _edited_spec(tmp_path, _a_new_field_every_product_shows)
    edited = served_contract(version, edited_spec)
    sort = next(
        p
        for p in edited["components"]["parameters"].values()
        if p["name"] == "sort" and "rating" in p["schema"]["pattern"]
    )
    assert "price\\.amount" in sort["schema"]["pattern"]
    assert breaking_changes(served_contract(version), edited) == []


def test_a_field_made_read_only_is_no_longer_accepted(tmp_path):
    def read_only_name(files):
        _schemas(_v1(files))["ProductFields"]["properties"]["name"]["readOnly"] = True

    edited = served_contract(1, _edited_spec(tmp_path, read_only_name))
    problems = breaking_changes(served_contract(1), edited)
    assert any("name: now read-only" in problem for problem in problems), problems
