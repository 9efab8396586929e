"""The contract and its docs UI are served by the app itself, with no CDN: each version's
contract as one bundled document (shared parts stay `$ref`s), prepared once, revalidated by
`ETag` and gzipped when asked."""

import gzip
import re

import httpx
import jsonschema
import pytest
import yaml
from openapi_spec_validator import validate
from support.contract_walk import follow_ref
from support.helpers import ONE_DATABASE
from support.live import ROOT, live_server

from models import demo, seed

METHODS = ("get", "put", "post", "delete", "patch")
# Headers that change what a request does: an example of one would be filled in by Swagger UI
# and sent with every "Try it out" (a stale If-Match is a 412, a key replays an old answer).
NEVER_PREFILLED = {"if-match", "if-none-match", "idempotency-key"}


def _operations(contract: dict) -> dict[str, tuple[str, str, dict]]:
    return {
        operation["operationId"]: (path, method, operation)
        for path, item in contract["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    }


def _parameters(contract: dict, path: str, method: str) -> list[dict]:
    item = contract["paths"][path]
    declared = [*item.get("parameters", []), *item[method].get("parameters", [])]
    return [follow_ref(contract, parameter) for parameter in declared]


@pytest.mark.parametrize("version", [1, 2, 3])
def test_the_contract_is_served_as_json_and_yaml(anonymous, version):
    as_json = anonymous.get(f"/v{version}/openapi.json")
    as_yaml = anonymous.get(f"/v{version}/openapi.yaml")
    assert as_json.status_code == 200 and as_yaml.status_code == 200
    assert as_json.headers["content-type"] == "application/json"
    assert as_yaml.headers["content-type"] == "application/yaml"
    contract = as_json.json()
    assert contract["openapi"].startswith("3.0")
    assert yaml.safe_load(as_yaml.text) == contract
    # v3 has no GET /users/{id}/orders, and has POST /products/batch.
    assert len(_operations(contract)) == 45
    validate(contract)  # valid OpenAPI 3.0, references and all


@pytest.mark.parametrize("version", [1, 2, 3])
def test_the_served_contract_keeps_its_shared_parts_as_references(anonymous, version):
    served = anonymous.get(f"/v{version}/openapi.json")
    contract = served.json()
    # Bundled, not dereferenced: a fraction of the 714 KB the dereferenced v1 document took.
    assert len(served.content) < 300_000
    assert not any(
        ref.startswith(("openapi.yaml", "v2.yaml", "components.yaml", "http"))
        for ref in re.findall(r'"\$ref":"([^"]*)"', served.text)
    )
    operations = _operations(contract)
    listing = operations["list_products"][2]
    assert listing["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ProductList"
    }
    # The list language is declared once per listed resource, and every list of it refers to it.
    orders = operations["list_orders"][2]
    shared = [p for p in orders["parameters"] if "OrderFields." in p.get("$ref", "")]
    assert len(shared) > 20
    if version != 3:  # v3 has no list of a user's orders
        user_orders = operations["list_user_orders"][2]
        assert all(p in user_orders["parameters"] for p in shared)
    assert {"$ref": "#/components/parameters/cursor"} in listing["parameters"]


def test_the_contract_is_prepared_bytes_revalidated_by_etag(anonymous):
    first = anonymous.get("/v1/openapi.json", headers={"Accept-Encoding": "identity"})
    again = anonymous.get("/v1/openapi.json", headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in first.headers
    assert first.content == again.content and first.headers["etag"] == again.headers["etag"]
    assert re.fullmatch(r'"[A-Za-z0-9_-]{43}"', first.headers["etag"])
    assert first.headers["cache-control"] == "no-cache"
    revalidated = anonymous.get(
        "/v1/openapi.json",
        headers={"If-None-Match": first.headers["etag"], "Accept-Encoding": "identity"},
    )
    assert revalidated.status_code == 304 and revalidated.content == b""
    assert revalidated.headers["etag"] == first.headers["etag"]
    head = anonymous.head("/v1/openapi.json", headers={"Accept-Encoding": "identity"})
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == str(len(first.content))
    yaml_tag = anonymous.get("/v1/openapi.yaml").headers["etag"]
    assert yaml_tag != first.headers["etag"]


@pytest.mark.slow
@ONE_DATABASE
def test_the_contract_is_gzipped_for_clients_that_ask(database_url):
    # A live server: the test client would decode the gzip body before the test sees it.
    with live_server(database_url) as base, httpx.Client(base_url=base) as http:
        with http.stream("GET", "/v1/openapi.json", headers={"Accept-Encoding": "gzip"}) as zipped:
            raw = b"".join(zipped.iter_raw())
        plain = http.get("/v1/openapi.json", headers={"Accept-Encoding": "identity"})
        refused = http.get("/v1/openapi.json", headers={"Accept-Encoding": "gzip;q=0"})
    assert zipped.headers["content-encoding"] == "gzip"
    assert "accept-encoding" in zipped.headers["vary"].lower()
    assert int(zipped.headers["content-length"]) == len(raw) < len(plain.content) / 5
    assert gzip.decompress(raw) == plain.content
    assert "content-encoding" not in refused.headers


def test_every_filter_is_a_parameter_of_the_served_contract(client):
    contract = client.get("/v1/openapi.json").json()
    names = {p["name"] for p in _parameters(contract, "/products", "get")}
    assert {"price_cents", "price_cents[gte]", "name[contains]", "category[in]"} <= names
    assert {"active", "active[ne]", "sort", "fields", "cursor", "page", "per_page"} <= names
    assert "active[gt]" not in names and "price_cents[contains]" not in names
    users = {p["name"] for p in _parameters(contract, "/users", "get")}
    assert not any(name.startswith("password") for name in users)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_no_example_is_harmful_or_invalid_when_swagger_ui_sends_it(anonymous, version):
    contract = anonymous.get(f"/v{version}/openapi.json").json()
    for operation_id, (path, method, _) in _operations(contract).items():
        for parameter in _parameters(contract, path, method):
            where = f"{operation_id}: {parameter['name']}"
            example = parameter.get("example", parameter["schema"].get("example"))
            if parameter["name"].lower() in NEVER_PREFILLED or parameter["name"] in (
                "sort",
                "fields",
            ):
                assert example is None, where
            elif example is not None:
                jsonschema.validate(example, follow_ref(contract, parameter["schema"]))


def test_the_hand_written_v2_contract_shows_every_operation_to_standard_tools():
    """Tools read spec/v2.yaml as OpenAPI says: its path items, or the ones they `$ref`. No
    private extension may hide an operation from them."""
    v1 = yaml.safe_load((ROOT / "spec" / "openapi.yaml").read_text())
    v2 = yaml.safe_load((ROOT / "spec" / "v2.yaml").read_text())
    assert "x-operations-of" not in (ROOT / "spec" / "v2.yaml").read_text()
    operations = set()
    for item in v2["paths"].values():
        if "$ref" in item:
            file, _, pointer = item["$ref"].partition("#/paths/")
            assert file == "openapi.yaml"
            item = v1["paths"][pointer.replace("~1", "/")]
        operations |= {item[m]["operationId"] for m in METHODS if m in item}
    assert operations == set(_operations(v1))


def test_swagger_ui_loads_every_asset_from_the_app(client):
    page = client.get("/v1/ui/")
    assert page.status_code == 200
    assert "openapi.json" in page.text
    assert not re.search(r"(?:src|href)=\"(?:https?:)?//", page.text)
    assets = re.findall(r"(?:src|href)=\"\./([^\"]+)\"", page.text)
    assert "swagger-ui-bundle.js" in assets
    for asset in assets:
        assert client.get(f"/v1/ui/{asset}").status_code == 200, asset


# What the server can answer whatever the operation, once a request has a body: its time (408,
# shopapi/pipeline/http_server.py), its size (413) and the database it is written to (503).
BODY_STATUSES = {"408", "413", "503"}
# The extensions by which Connexion finds our code: never in a document a client reads.
CODE_NAME = re.compile(r'"x-(?:openapi-router-controller|\w+InfoFunc|\w+ValidateFunc)"')
MODULE_NAME = re.compile(r'"(?:handlers|shopapi|models|app)\.\w+')


@pytest.mark.parametrize("version", [1, 2, 3])
def test_every_link_leads_to_an_operation_of_its_own_contract(anonymous, version):
    # v3 takes v1's POST /users, whose 201 linked to list_user_orders, which v3 does not serve.
    contract = anonymous.get(f"/v{version}/openapi.json").json()
    operations = _operations(contract)
    links = [
        (f"{operation_id} {status} {name}", link)
        for operation_id, (_, _, operation) in operations.items()
        for status, response in operation["responses"].items()
        for name, link in follow_ref(contract, response).get("links", {}).items()
    ]
    assert len(links) > 20
    for where, link in links:
        assert link["operationId"] in operations, where
        path, method, _ = operations[link["operationId"]]
        names = {p["name"] for p in _parameters(contract, path, method)}
        assert set(link.get("parameters", {})) <= names, where


@pytest.mark.parametrize("version", [1, 2, 3])
def test_every_operation_with_a_body_declares_what_a_body_can_be_answered(anonymous, version):
    contract = anonymous.get(f"/v{version}/openapi.json").json()
    with_body = [
        (operation_id, set(operation["responses"]))
        for operation_id, (_, _, operation) in _operations(contract).items()
        if "requestBody" in operation
    ]
    assert len(with_body) > 15
    for operation_id, statuses in with_body:
        assert statuses >= BODY_STATUSES, (operation_id, BODY_STATUSES - statuses)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_the_served_contract_names_no_code(anonymous, version):
    served = anonymous.get(f"/v{version}/openapi.json")
    assert not CODE_NAME.search(served.text), CODE_NAME.search(served.text)[0]
    assert not MODULE_NAME.search(served.text), MODULE_NAME.search(served.text)[0]
    assert not CODE_NAME.search(anonymous.get(f"/v{version}/openapi.yaml").text.replace(":", '"'))
    # The app still routes and checks credentials by them: the spec files keep them.
    assert "x-openapi-router-controller" in (ROOT / "spec" / "openapi.yaml").read_text()


@pytest.mark.parametrize("version", [1, 2, 3])
def test_the_token_url_is_the_contracts_own(anonymous, version):
    contract = anonymous.get(f"/v{version}/openapi.json").json()
    flows = contract["components"]["securitySchemes"]["oauth2"]["flows"]
    urls = {flow["tokenUrl"] for flow in flows.values()} | {flows["password"]["refreshUrl"]}
    assert urls == {f"/v{version}/oauth/token"}
    assert contract["servers"] == [{"url": f"/v{version}"}]
    assert "post" in contract["paths"]["/oauth/token"]


def _examples(node, pointer=""):
    """Every example in `node`, with its JSON pointer."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "example":
                yield pointer, value
            elif key == "examples" and isinstance(value, dict):
                for name, example in value.items():
                    yield f"{pointer}/examples/{name}", example.get("value")
            else:
                yield from _examples(value, f"{pointer}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _examples(value, f"{pointer}/{index}")


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict | list):
        for item in value.values() if isinstance(value, dict) else value:
            yield from _strings(item)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_no_example_names_demo_data(anonymous, version):
    # The docs UI fills examples in: one that names a demo row writes over it or deletes it
    # (a batch of the demo's MUG-001, DELETE /users/1 of the demo admin).
    contract = anonymous.get(f"/v{version}/openapi.json").json()
    demo_values = {p["sku"] for p in seed.PRODUCTS} | {a["email"] for a in demo.ACCOUNTS}
    # Logging in writes nothing: the token request may show the demo admin's email.
    login = "/components/schemas/TokenRequest/"
    for pointer, example in _examples(contract):
        if not pointer.startswith(login):
            assert not demo_values & set(_strings(example)), pointer
    # The demo's rows are the first few of each table: no path example names one.
    demo_rows = max(len(seed.PRODUCTS), len(demo.ACCOUNTS))
    for operation_id, (path, method, _) in _operations(contract).items():
        for parameter in _parameters(contract, path, method):
            if parameter["in"] == "path":
                example = parameter.get("example", parameter["schema"].get("example"))
                assert example is None or example > demo_rows, (operation_id, parameter["name"])


@pytest.mark.parametrize("version", ["v1", "v2", "v3"])
def test_the_docs_ui_runs_only_its_own_scripts_and_is_never_framed(client, version):
    """No inline script (the page's options are a JSON data block), and on the page and each of
    its assets a policy that runs scripts from the app only and forbids framing."""
    page = client.get(f"/{version}/ui/")
    scripts = re.findall(r"<script([^>]*)>", page.text)
    assert all("src=" in attributes or "application/json" in attributes for attributes in scripts)
    assets = re.findall(r"(?:src|href)=\"\./([^\"]+)\"", page.text)
    assert "shopapi/docs-ui.js" in assets
    for response in [page, *(client.get(f"/{version}/ui/{asset}") for asset in assets)]:
        policy = response.headers["content-security-policy"]
        assert "script-src 'self';" in policy
        assert "frame-ancestors 'none'" in policy
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"
