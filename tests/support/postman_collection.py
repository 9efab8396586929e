"""The Postman collection we ship (docs/postman/shopapi-v3.postman_collection.json): version 3's
served contract converted by openapi-to-postmanv2 (tests/contract_tools), then made to run from
top to bottom against a fresh `make run`: a login that keeps the token for every other request,
the requests in an order where each uses the ids that earlier ones made, bodies without read-only
fields. After a change to the contract, write it again with
`python tests/support/postman_collection.py --write` (`make postman-collection`);
tests/test_postman_collection.py holds the file to this and runs it with newman.
"""

import json
import pathlib
import subprocess
import sys
import tempfile
import uuid

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # run as a script too

from shopapi.contract.served import without_code_names  # noqa: E402
from support.contract_compatibility import served_contract  # noqa: E402
from support.contract_walk import follow_ref  # noqa: E402

VERSION = 3
COLLECTION = ROOT / "docs" / "postman" / f"shopapi-v{VERSION}.postman_collection.json"
CONVERTER = ROOT / "tests" / "contract_tools" / "node_modules" / ".bin" / "openapi2postmanv2"
# Parameters from the contract's examples, optional ones present but not sent, folders by tag
# (regrouped below), every request taking the collection's credentials.
CONVERTER_OPTIONS = (
    "parametersResolution=Example,enableOptionalParameters=false,"
    "folderStrategy=Tags,alwaysInheritAuthentication=true"
)
BASE_URL = f"http://127.0.0.1:8000/v{VERSION}"  # `make run`'s; newman's --env-var baseUrl=...
METHODS = ("get", "put", "post", "delete", "patch")

# The run, in order: each folder's operations. What a request makes (a user, a product, ...) is
# used by the requests after it and removed at the end, in an order references allow (a user
# with an order, a device or an API key cannot go before them).
LOG_IN = "issue_token"  # the demo admin's password grant: its answer's token is sent by the rest
RUN = [
    ("Log in", [LOG_IN]),
    ("Users", ["list_users", "create_user", "get_user", "replace_user", "update_user"]),
    (
        "Products",
        [
            "list_products",
            "create_product",
            "get_product",
            "replace_product",
            "update_product",
            "upsert_products",
        ],
    ),
    ("Orders", ["list_orders", "create_order", "get_order", "replace_order", "update_order"]),
    (
        "Events and webhooks",
        [
            "list_events",
            "get_event",
            "list_webhooks",
            "create_webhook",
            "get_webhook",
            "update_webhook",
            "redeliver",
            "list_webhook_deliveries",
            "get_webhook_delivery",
        ],
    ),
    (
        "Push",
        [
            "get_vapid_public_key",
            "list_devices",
            "register_device",
            "get_device",
            "list_device_deliveries",
        ],
    ),
    (
        "OAuth clients and API keys",
        [
            "list_oauth_clients",
            "register_oauth_client",
            "get_oauth_client",
            "list_api_keys",
            "create_api_key",
            "get_api_key",
        ],
    ),
    (
        "Clean up",
        [
            "delete_device",
            "delete_webhook",
            "revoke_api_key",
            "delete_oauth_client",
            "delete_order",
            "delete_product",
            "delete_user",
        ],
    ),
]
# Operations not in the run, and why.
LEFT_OUT = {
    "stream_events": "an event stream does not end by itself (15 minutes), and a runner such as "
    "newman waits for an answer's end: follow it with `curl -N` or an EventSource",
}

# What a request keeps of its answer for the requests after it: (variable, a path into the JSON).
KEPT = {
    "issue_token": ("accessToken", "access_token"),
    "create_user": ("userId", "id"),
    "create_product": ("productId", "id"),
    "upsert_products": ("batchProductId", "data.0.id"),
    "create_order": ("orderId", "id"),
    "list_events": ("eventId", "data.0.id"),
    "create_webhook": ("webhookId", "id"),
    "redeliver": ("deliveryId", "id"),
    "register_device": ("deviceId", "id"),
    "register_oauth_client": ("clientId", "id"),
    "create_api_key": ("apiKeyId", "id"),
}
IDS = {variable for variable, _ in KEPT.values() if variable != "accessToken"}
# Each path parameter, by path, as the variable a request before it kept.
PATH_VARIABLES = {
    "/users/{id}": {"id": "userId"},
    "/products/{id}": {"id": "productId"},
    "/orders/{id}": {"id": "orderId"},
    "/events/{id}": {"id": "eventId"},
    "/webhooks/{id}": {"id": "webhookId"},
    "/webhooks/{webhook_id}/deliveries": {"webhook_id": "webhookId"},
    "/webhooks/{webhook_id}/deliveries/{id}": {"webhook_id": "webhookId", "id": "deliveryId"},
    "/users/{user_id}/devices": {"user_id": "userId"},
    "/users/{user_id}/devices/{id}": {"user_id": "userId", "id": "deviceId"},
    "/users/{user_id}/devices/{device_id}/deliveries": {
        "user_id": "userId",
        "device_id": "deviceId",
    },
    "/oauth/clients/{id}": {"id": "clientId"},
    "/api-keys/{id}": {"id": "apiKeyId"},
}
# Optional parameters sent, where the run needs them or they show what v3 adds.
SENT = {
    "list_products": {"Prefer": "count=exact", "per_page": "5"},
    "list_orders": {"expand": "user,items.product", "per_page": "5"},
    "get_order": {"expand": "user,items.product"},
    "list_events": {"type": "order.created", "sort": "-id", "per_page": "1"},
}
# Bodies where the contract's examples would not do: values unique to the run ({{run}}, set at
# log-in), ids kept from earlier answers, a state the run moves through. Ids are numbers.
BODIES = {
    "issue_token": {
        "grant_type": "password",
        "username": "{{username}}",
        "password": "{{password}}",
    },
    "create_user": {
        "email": "ada-{{run}}@example.com",
        "name": "Ada Lovelace",
        "password": "correct-horse-battery",
        "role": "customer",
    },
    "replace_user": {
        "email": "ada-{{run}}@example.com",
        "name": "Ada King",
        "password": "correct-horse-battery-staple",
        "role": "customer",
    },
    "update_user": {"name": "Ada, Countess of Lovelace"},
    "create_product": {
        "sku": "CUP-{{run}}",
        "name": "Espresso cup",
        "price": {"amount": "6.90", "currency": "EUR"},
        "stock": 12,
    },
    "replace_product": {
        "sku": "CUP-{{run}}",
        "name": "Espresso cup, white",
        "price": {"amount": "7.20", "currency": "EUR"},
        "stock": 12,
        "category": "kitchen",
    },
    "update_product": {"stock": 50, "description": None},
    "upsert_products": {
        "products": [
            {
                "sku": "SAUCER-{{run}}",
                "name": "Saucer",
                "price": {"amount": "3.50", "currency": "EUR"},
                "stock": 20,
            },
            {
                "sku": "PLATE-{{run}}",
                "name": "Plate",
                "price": {"amount": "9.00", "currency": "EUR"},
                "stock": 20,
            },
        ]
    },
    "create_order": {
        "user_id": "{{userId}}",
        "items": [{"product_id": "{{batchProductId}}", "quantity": 2}],
        "note": "Leave at the door.",
    },
    "replace_order": {"status": "paid", "note": "Leave at the door."},
    "update_order": {"status": "cancelled"},
    "create_webhook": {
        "url": "https://partner.example.com/hooks/shopapi",
        "events": ["order.created", "order.status_changed"],
        "description": "Made by the Postman collection",
    },
    "update_webhook": {"description": "Made by the Postman collection, changed"},
    "redeliver": {"event_id": "{{eventId}}"},
    "register_device": {"platform": "fcm", "token": "postman-{{run}}"},
    "register_oauth_client": {"name": "Postman {{run}}", "scopes": ["products:read"]},
    "create_api_key": {
        "name": "Postman {{run}}",
        "owner_id": "{{userId}}",
        "scopes": ["products:read", "orders:read"],
    },
}
# Answers besides the contract's 2xx that are right against `make run`, and why.
ALSO_RIGHT = {
    # `make run` sends no Web Push (no VAPID key configured): the contract's documented 404.
    "get_vapid_public_key": [404],
}
# Set at log-in, so that each run's SKUs and emails are its own (SKUs are upper case).
NEW_RUN = "pm.collectionVariables.set('run', Date.now().toString(36).toUpperCase());"


def converted(contract: dict) -> dict:
    """openapi-to-postmanv2's collection of `contract`."""
    with tempfile.TemporaryDirectory() as directory:
        source, target = pathlib.Path(directory, "v.json"), pathlib.Path(directory, "c.json")
        source.write_text(json.dumps(contract))
        command = [CONVERTER, "-s", source, "-o", target, "-O", CONVERTER_OPTIONS]
        subprocess.run(command, check=True, capture_output=True, timeout=300)
        return json.loads(target.read_text())


def _requests(items: list) -> dict[tuple[str, str], dict]:
    """The converter's requests (in folders), by method and path (`/users/{id}`)."""
    found = {}
    for item in items:
        if "item" in item:
            found.update(_requests(item["item"]))
            continue
        path = "/" + "/".join(
            "{" + part[1:] + "}" if part.startswith(":") else part
            for part in item["request"]["url"]["path"]
        )
        found[(item["request"]["method"].lower(), path)] = item
    return found


def _schema(contract: dict, node) -> dict:
    """`node` with its `$ref`s followed and its `allOf` parts' properties merged."""
    node = follow_ref(contract, node)
    merged = dict(node)
    for part in node.get("allOf", []):
        part = _schema(contract, part)
        merged["properties"] = {**part.get("properties", {}), **merged.get("properties", {})}
        merged["readOnly"] = merged.get("readOnly") or part.get("readOnly", False)
        merged.setdefault("items", part.get("items"))
    return merged


def read_only_fields(contract: dict, schema: dict, body, where: str = "") -> list[str]:
    """The fields of `body` that `schema` marks read-only (an order item's `unit_price`)."""
    schema = _schema(contract, schema)
    found = []
    if isinstance(body, dict):
        for name, value in body.items():
            field = _schema(contract, schema.get("properties", {}).get(name, {}))
            if field.get("readOnly"):
                found.append(f"{where}/{name}")
            else:
                found += read_only_fields(contract, field, value, f"{where}/{name}")
    elif isinstance(body, list) and schema.get("items"):
        for n, value in enumerate(body):
            found += read_only_fields(contract, schema["items"], value, f"{where}/{n}")
    return found


def _raw(body: dict) -> str:
    """JSON text of a body, with the id variables as numbers (`"user_id": {{userId}}`)."""
    text = json.dumps(body, indent=2)
    for variable in IDS:
        text = text.replace(f'"{{{{{variable}}}}}"', f"{{{{{variable}}}}}")
    return text


def _parameter_value(parameter: dict) -> str:
    """An optional parameter's value as the collection shows it, not sent: the contract's
    example or default, else nothing (the converter's are made up, and differ at each run)."""
    schema = parameter.get("schema", {})
    for value in (parameter.get("example"), schema.get("example"), schema.get("default")):
        if value is not None:
            return str(value)
    return ""


def _tests(operation_id: str, operation: dict) -> list[str]:
    codes = sorted(int(c) for c in operation["responses"] if c.startswith("2"))
    codes += ALSO_RIGHT.get(operation_id, [])
    lines = [f"pm.test('answers {' or '.join(map(str, codes))}', function () {{"]
    lines.append(f"    pm.expect(pm.response.code).to.be.oneOf({json.dumps(codes)});")
    if operation_id in KEPT:
        variable, path = KEPT[operation_id]
        reach = "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in path.split("."))
        lines.append(f"    pm.collectionVariables.set('{variable}', pm.response.json(){reach});")
    lines.append("});")
    return lines


def _request(
    contract: dict, operation_id: str, path: str, operation: dict, parameters: list, item: dict
) -> dict:
    """The converter's request for `operation` (with its path's `parameters`), made to take its
    place in the run."""
    request = item["request"]
    parameters = {(p["in"], p["name"]): p for p in (follow_ref(contract, p) for p in parameters)}
    sent = SENT.get(operation_id, {})
    url = request["url"]
    for variable in url["variable"]:
        variable["value"] = "{{" + PATH_VARIABLES[path][variable["key"]] + "}}"
    for kind, entries in (("query", url.get("query", [])), ("header", request["header"])):
        for entry in entries:
            parameter = parameters.get((kind, entry["key"]))
            if parameter is None:  # Accept, Content-Type
                continue
            if entry["key"] in sent:
                entry["value"], entry["disabled"] = sent[entry["key"]], False
            elif entry.get("disabled"):
                entry["value"] = _parameter_value(parameter)
    body = request.get("body") or {}
    if body.get("mode") == "urlencoded":
        fields = BODIES[operation_id]
        body["urlencoded"] = [
            {"key": key, "value": value, "type": "text"} for key, value in fields.items()
        ]
    elif body.get("mode") == "raw":
        sent_body = BODIES.get(operation_id) or json.loads(body["raw"])
        body["raw"] = _raw(sent_body)
        media_type = next(
            entry["value"] for entry in request["header"] if entry["key"] == "Content-Type"
        )
        schema = operation["requestBody"]["content"][media_type]["schema"]
        if read_only := read_only_fields(contract, schema, sent_body):
            raise ValueError(f"{operation_id}'s body has read-only fields: {read_only}")
    events = [("test", _tests(operation_id, operation))]
    if operation_id == LOG_IN:
        events.insert(0, ("prerequest", [NEW_RUN]))
    shaped = {
        "name": item["name"],
        "event": [
            {"listen": listen, "script": {"type": "text/javascript", "exec": lines}}
            for listen, lines in events
        ],
        "request": request,
    }
    request.pop("name", None)
    if operation_id == LOG_IN:
        request["auth"] = {"type": "noauth"}
    else:
        request.pop("auth", None)  # the collection's
    if not body:
        request.pop("body", None)
    return shaped


def build(contract: dict, raw: dict) -> dict:
    """The shipped collection, from the served `contract` and the converter's `raw` one."""
    operations = {
        operation["operationId"]: (method, path, operation, item.get("parameters", []))
        for path, item in contract["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    }
    placed = [operation_id for _, operation_ids in RUN for operation_id in operation_ids]
    unplaced = set(operations) - set(placed) - set(LEFT_OUT)
    if unplaced or len(placed) != len(set(placed)) or set(placed) - set(operations):
        raise ValueError(f"the run must place each operation once; not placed: {unplaced}")
    requests = _requests(raw["item"])
    folders = []
    for name, operation_ids in RUN:
        items = []
        for operation_id in operation_ids:
            method, path, operation, shared = operations[operation_id]
            parameters = [*shared, *operation.get("parameters", [])]
            item = requests[(method, path)]
            items.append(_request(contract, operation_id, path, operation, parameters, item))
        folders.append({"name": name, "item": items})
    left_out = "".join(
        f"\n- `{operations[o][0].upper()} {operations[o][1]}` ({o}): {why}."
        for o, why in LEFT_OUT.items()
    )
    variables = {
        "baseUrl": BASE_URL,
        "username": "admin@example.com",
        "password": "admin-pass",
        "run": "",
        "accessToken": "",
        **{variable: "" for variable in sorted(IDS)},
    }
    description = (
        f"Version {VERSION} of the shopapi contract ({contract['info']['version']}) as a run: "
        f"{len(placed)} requests, from the log-in (the demo admin of `make run`, the "
        "collection's `username` and `password`) to a clean-up of what the run made; each "
        "request checks its status and keeps the ids the ones after it use. Against another "
        "server, set `baseUrl` (with the version: `https://shop.example/v3`). Made from the "
        "served contract by tests/support/postman_collection.py; docs/clients.md says how to "
        f"run it.\n\nLeft out:{left_out}"
    )
    return {
        "info": {
            "_postman_id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"shopapi-v{VERSION}")),
            "name": f"shopapi v{VERSION}",
            "description": description,
            "schema": raw["info"]["schema"],
        },
        "auth": {
            "type": "bearer",
            "bearer": [{"key": "token", "value": "{{accessToken}}", "type": "string"}],
        },
        "variable": [{"key": key, "value": value} for key, value in variables.items()],
        "item": folders,
    }


def served() -> dict:
    """Version VERSION's contract as the server serves it."""
    return without_code_names(served_contract(VERSION))


def collection() -> dict:
    contract = served()
    return build(contract, converted(contract))


def text(made: dict) -> str:
    return json.dumps(made, indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(f"usage: {sys.argv[0]} --write   (write {COLLECTION.relative_to(ROOT)})")
    COLLECTION.parent.mkdir(exist_ok=True)
    COLLECTION.write_text(text(collection()))
    print(f"wrote {COLLECTION.relative_to(ROOT)}")
