"""Hooks for the contract fuzzing (named in schemathesis.toml)."""

import os
import pathlib
import re
import uuid

import jsonschema
import schemathesis
from schemathesis.generation.meta import CoveragePhaseData, CoverageScenario

from shopapi.contract import spec_files

# A cursor is valid only as the API issued it (signed, bound to its filters and sort), so every
# generated one is a documented 400 that no schema can express — and so is one next to `page`.
# Valid cases drop it; tests/test_list_edges.py covers cursors.

# The run's own API key and its owner (see tests/test_contract.py): an operation that would
# revoke the key, or delete, replace or demote its owner, is pointed at another id instead.
_PROTECTED = {
    "revoke_api_key": os.environ.get("FUZZ_PROTECTED_API_KEY"),
    "delete_user": os.environ.get("FUZZ_PROTECTED_USER"),
    "replace_user": os.environ.get("FUZZ_PROTECTED_USER"),
    "update_user": os.environ.get("FUZZ_PROTECTED_USER"),
}
_ELSEWHERE = 2_000_000_000

# Bundled: the components it reads are written in spec/components.yaml.
_CONTRACT = spec_files.load(pathlib.Path(__file__).resolve().parents[2] / "spec" / "openapi.yaml")

# An Idempotency-Key binds to its first request for a day. The generators favour short values
# ("0", "00"), so a generated key comes back with another body (a documented 422 no schema can
# express) or with the same body after the run deleted what it created (a replayed 201 whose
# resource is gone). Each schema-valid key is made unique; invalid ones go as generated, so
# their 400 is still checked. tests/test_idempotency.py covers a key used again.
_VALID_KEY = jsonschema.Draft4Validator(
    _CONTRACT["components"]["parameters"]["IdempotencyKey"]["schema"]
)

# Conditional requests (shopapi/web/etags.py). No schema can name a resource's current ETag, so the
# well-formed If-Match values the generators invent would make nearly every change a documented
# 412 (tests/test_etags.py covers those): in positive cases it is `*`, which any existing resource
# matches, so the changes themselves are fuzzed, through the conditional path. And the coverage
# phase builds cases it calls positive from a header value it generated as negative (`0`, its
# "all required properties and optional 'If-None-Match'" cases): such a value becomes `*` too.
#
# The coverage phase also probes each parameter location with an unknown field. HTTP ignores a
# header field it does not know (RFC 9110 5.1), so the API serves that probe although it counts
# as negative; since headers are a parameter location here, the probe runs before an operation's
# positive cases and would delete or change what they need (the one cancelled order a DELETE
# could take). It is pointed at an id no resource has instead.
_ENTITY_TAGS = re.compile(_CONTRACT["components"]["parameters"]["IfNoneMatch"]["schema"]["pattern"])


# The coverage phase's budget outside CI (tests/test_contract.py): FUZZ_COVERAGE=first-of-each-kind
# sends, of an operation's cases for one scenario on one parameter, only the first. A list's
# comparison filters (`price_cents[lt]`, `[gte]`, `[ne]`...) take their field's values, so they
# count as their field (`[in]` and `[contains]` have their own forms).
_FIRST_OF_EACH_KIND = os.environ.get("FUZZ_COVERAGE") == "first-of-each-kind"
_COMPARISON = re.compile(r"\[(ne|lt|lte|gt|gte)\]$")
_kinds_sent = set()


@schemathesis.hook
def filter_case(context, case):
    data = case.meta.phase.data if case.meta else None
    if not _FIRST_OF_EACH_KIND or not isinstance(data, CoveragePhaseData):
        return True
    kind = (
        case.operation.label,
        case.meta.generation.mode,
        data.scenario,
        data.parameter_location,
        _COMPARISON.sub("", data.parameter or ""),
    )
    if kind in _kinds_sent:
        return False
    _kinds_sent.add(kind)
    return True


@schemathesis.hook
def map_case(context, case):
    # In a case meant to be invalid the cursor may be what makes it so: it stays (a 400 either
    # way). Dropping it there turned such a case into a valid request, which the API rightly
    # served.
    negative = case.meta is not None and case.meta.generation.mode.is_negative
    if case.query and not negative:
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
    if _unknown_header_probe(case) and case.path_parameters and "id" in case.path_parameters:
        case.path_parameters["id"] = _ELSEWHERE
    if case.operation.definition.raw.get("operationId") == "stream_events":
        _resume_from_the_first_event(case)
    positive = case.meta is None or not case.meta.generation.mode.is_negative
    if case.headers and positive:
        if "If-Match" in case.headers:
            case.headers["If-Match"] = "*"
        condition = case.headers.get("If-None-Match")
        if condition is not None and not _ENTITY_TAGS.fullmatch(str(condition)):
            case.headers["If-None-Match"] = "*"


def _unknown_header_probe(case) -> bool:
    data = getattr(case.meta.phase, "data", None) if case.meta else None
    return (
        getattr(data, "scenario", None) == CoverageScenario.OBJECT_UNEXPECTED_PROPERTIES
        and data.parameter_location == "header"
    )


# The event stream (GET /events/stream) sends only what happens after it opens, unless it is
# resumed: a stream the run opens would send nothing until schemathesis's request timeout. So a
# request with no Last-Event-ID, or a well-formed one, resumes after 0; the run's users' events
# are there, and the first is read and checked (schemathesis.toml: max-stream-events = 1). A
# malformed Last-Event-ID is sent as generated, and refused (400).
_LAST_EVENT_ID = re.compile(
    _CONTRACT["paths"]["/events/stream"]["get"]["parameters"][0]["schema"]["pattern"]
)


def _resume_from_the_first_event(case) -> None:
    value = (case.headers or {}).get("Last-Event-ID")
    if value is None or (isinstance(value, str) and _LAST_EVENT_ID.search(value)):
        case.headers = {**(case.headers or {}), "Last-Event-ID": "0"}
