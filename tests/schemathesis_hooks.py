"""Hooks for the contract fuzzing (named in schemathesis.toml)."""

import os
import pathlib
import uuid

import jsonschema
import schemathesis
import yaml

# A cursor is valid only as the API issued it (signed, bound to its filters and sort), so every
# generated one is a documented 400 that no schema can express — and so is one next to `page`.
# The generators drop it; tests/test_list_edges.py covers cursors.

# The run's own API key and its owner (see tests/test_contract.py): an operation that would
# revoke the key, or delete, replace or demote its owner, is pointed at another id instead.
_PROTECTED = {
    "revoke_api_key": os.environ.get("FUZZ_PROTECTED_API_KEY"),
    "delete_user": os.environ.get("FUZZ_PROTECTED_USER"),
    "replace_user": os.environ.get("FUZZ_PROTECTED_USER"),
    "update_user": os.environ.get("FUZZ_PROTECTED_USER"),
}
_ELSEWHERE = 2_000_000_000

# An Idempotency-Key binds to its first request for a day. The generators favour short values
# ("0", "00"), so a generated key comes back with another body (a documented 422 no schema can
# express) or with the same body after the run deleted what it created (a replayed 201 whose
# resource is gone). Each schema-valid key is made unique; invalid ones go as generated, so
# their 400 is still checked. tests/test_idempotency.py covers a key used again.
_SPEC = pathlib.Path(__file__).resolve().parent.parent / "spec" / "openapi.yaml"
_VALID_KEY = jsonschema.Draft4Validator(
    yaml.safe_load(_SPEC.read_text())["components"]["parameters"]["IdempotencyKey"]["schema"]
)


@schemathesis.hook
def map_query(context, query):
    if query:
        query.pop("cursor", None)
    return query


@schemathesis.hook
def map_case(context, case):
    # The coverage phase builds cases without the query hooks.
    if case.query:
        case.query.pop("cursor", None)
    return case


@schemathesis.hook
def before_call(context, case, **kwargs):
    # Every phase's requests pass here, the stateful phase's (ids taken from links) included.
    protected = _PROTECTED.get(case.operation.definition.raw.get("operationId"))
    if protected and case.path_parameters and str(case.path_parameters.get("id")) == protected:
        case.path_parameters["id"] = _ELSEWHERE
    key = (case.headers or {}).get("Idempotency-Key")
    if isinstance(key, str) and _VALID_KEY.is_valid(key):
        case.headers["Idempotency-Key"] = uuid.uuid4().hex
