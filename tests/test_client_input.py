"""Nothing a client sends is a 500, or is answered with what its Host header says. Each rule is
held to every operation, parameter or field the served contracts have
(tests/support/contract_walk.py):

- a body's media type is read as RFC 9110 reads it, in any case and with parameters, so every
  body is validated; a body without a Content-Type is 415;
- a NUL in any query or form value is a 400 naming it (PostgreSQL cannot store one);
- a time outside years 1 to 9999 in UTC, in any body or query filter, is a 400 naming it;
- a path that is not a route is a 404, never a redirect to a URL built from `Host`;
- every `pattern` means to the server what it means to a JavaScript client (ECMA-262's RegExp);
- and a property test: requests built from the contracts' operations, with random bytes,
  random-case media types and random query values, are never answered with a 5xx.
"""

import base64
import datetime
import itertools
import json
import os
import shutil
import string
import subprocess
from urllib.parse import quote, quote_from_bytes

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.contract_walk import operations, pointers_of_format
from support.contract_walk import patterns as contract_patterns
from support.helpers import ONE_DATABASE, assert_problem, create_user

from shopapi.contract.patterns import ecma_regex

NUL = "must not contain NUL characters"


def _with_body(client) -> list:
    return [op for op in operations(client) if op.bodies]


# --- media types ----------------------------------------------------------------------------


def test_a_body_without_a_content_type_is_415_wherever_a_body_is_taken(client):
    for op in _with_body(client):
        for body in (b"{}", b"grant_type=password", b"\xff"):
            response = client.request(op.method, op.url(), content=body)
            problem = assert_problem(response, 415)
            assert all(media_type in problem["detail"] for media_type in op.bodies), op
    # No body, no Content-Type: the body is missing, not of the wrong type.
    assert_problem(client.post("/v1/products"), 400)


def _cases(media_type: str) -> list[str]:
    return [
        media_type.upper(),
        media_type.title(),
        f"{media_type}; charset=UTF-8",
        f"{media_type.upper()};Charset=utf-8",
        f" {media_type.swapcase()} ; charset=utf-8",
    ]


def _errors(response) -> list:
    return response.json().get("errors")


def test_a_media_type_in_any_case_and_with_parameters_is_validated_the_same(client, anonymous):
    """`APPLICATION/JSON` used to skip validation (the handler then failed with a 500); a token
    request as `APPLICATION/X-WWW-FORM-URLENCODED` with a NUL in `username` reached PostgreSQL
    without credentials."""
    for op in _with_body(client):
        for media_type in op.bodies:
            if media_type == "application/x-www-form-urlencoded":
                caller, body = anonymous, b"grant_type=password&username=a%00b&password=x"
            else:
                caller, body = client, b"[]"  # every JSON body is an object
            as_declared = caller.request(
                op.method, op.url(), content=body, headers={"Content-Type": media_type}
            )
            assert_problem(as_declared, 400)
            for content_type in _cases(media_type):
                response = caller.request(
                    op.method, op.url(), content=body, headers={"Content-Type": content_type}
                )
                assert_problem(response, 400)
                assert _errors(response) == _errors(as_declared), (op, content_type)


def test_a_request_with_two_content_types_is_400(client):
    headers = [("content-type", "application/json"), ("content-type", "text/plain")]
    response = client.post("/v1/products", content=b"{}", headers=headers)
    assert "more than one Content-Type" in assert_problem(response, 400)["detail"]


# --- NUL ------------------------------------------------------------------------------------


def test_a_nul_in_any_query_value_is_400_naming_it(client):
    for op in operations(client):
        names = [p["name"] for p in op.query_parameters()] + ["undeclared"]
        query = "&".join(f"{quote(name, safe='[]')}=a%00b" for name in names)
        body = assert_problem(client.request(op.method, f"{op.url()}?{query}"), 400)
        for name in names:
            assert {"parameter": name, "detail": NUL} in body["errors"], (op, name)


def test_a_nul_in_any_form_value_is_400_naming_it(client, anonymous):
    (token,) = [op for op in operations(client, versions=(1,)) if op.id == "issue_token"]
    fields = [*token.bodies["application/x-www-form-urlencoded"]["properties"], "undeclared"]
    for content_type in ("application/x-www-form-urlencoded", "APPLICATION/X-WWW-FORM-URLENCODED"):
        for field in fields:
            form = {"grant_type": "password", "username": "a@example.com", "password": "x"}
            body = "&".join(f"{k}={quote(v)}" for k, v in {**form, field: "a\x00b"}.items())
            response = anonymous.post(
                token.url(), content=body.encode(), headers={"Content-Type": content_type}
            )
            problem = assert_problem(response, 400)
            assert problem["errors"] == [{"pointer": f"/{field}", "detail": NUL}], field
            assert "a\x00b" not in response.text  # a password is never quoted back


def test_a_nul_in_a_basic_client_id_is_401(anonymous):
    """The Basic credentials of the token endpoint are no form field: no validation sees them."""
    for pair in (b"a\x00b:secret", b"a%00b:secret"):
        response = anonymous.post(
            "/v1/oauth/token",
            data={"grant_type": "client_credentials"},
            headers={"Authorization": f"Basic {base64.b64encode(pair).decode()}"},
        )
        assert response.status_code == 401, response.text
        assert response.json()["error"] == "invalid_client"


# --- times ------------------------------------------------------------------------------------

# Valid RFC 3339, but no UTC time: year 10000 and year 0 there.
OUT_OF_RANGE = ["9999-12-31T23:59:59-05:00", "0001-01-01T00:00:00+01:00"]
EDGES = ["9999-12-31T23:59:59Z", "0001-01-01T00:00:00-01:00"]


def _is_time(schema: dict) -> bool:
    return "date-time" in (schema.get("format"), schema.get("items", {}).get("format"))


def test_a_time_out_of_range_is_400_naming_it_in_every_body_and_filter(client):
    checked = 0
    for op in operations(client):
        names = [p["name"] for p in op.query_parameters() if _is_time(p["schema"])]
        if names:
            for value in OUT_OF_RANGE:
                query = "&".join(f"{quote(name, safe='[]')}={quote(value)}" for name in names)
                body = assert_problem(client.request(op.method, f"{op.url()}?{query}"), 400)
                assert sorted(e["parameter"] for e in body["errors"]) == sorted(names), op
            query = "&".join(f"{quote(name, safe='[]')}={quote(EDGES[0])}" for name in names)
            response = client.request(op.method, f"{op.url()}?{query}")
            assert response.status_code in (200, 404), (op, response.text)
            checked += len(names)
        for media_type, schema in op.bodies.items():
            for where in pointers_of_format(schema, op.resolve, "date-time"):
                for value in OUT_OF_RANGE:
                    response = client.request(
                        op.method,
                        op.url(),
                        content=json.dumps(_document_at(where, value)),
                        headers={"Content-Type": media_type},
                    )
                    body = assert_problem(response, 400)
                    error = {"pointer": where, "detail": "is not a 'date-time'"}
                    assert error in body["errors"], (op, value)
                checked += 1
    assert checked > 100  # the list filters of every time field, and expires_at of an API key


def _document_at(pointer: str, value):
    document = value
    for part in reversed(pointer.split("/")[1:]):
        document = [document] if part == "0" else {part: document}
    return document


def test_an_api_key_expiring_at_the_edge_of_time_is_issued(client):
    partner = create_user(client, role="partner")
    for expires_at in ("9999-12-31T23:59:59Z", "9999-12-31T23:59:59+05:00"):
        response = client.post(
            "/v1/api-keys",
            json={
                "name": "k",
                "scopes": ["products:read"],
                "owner_id": partner["id"],
                "expires_at": expires_at,
            },
        )
        assert response.status_code == 201, response.text
        stored = datetime.datetime.fromisoformat(response.json()["expires_at"])
        assert stored == datetime.datetime.fromisoformat(expires_at)


# --- paths ----------------------------------------------------------------------------------

HOST = "attacker.example"
# What each odd path answers: a 404, or the docs UI's own relative redirect.
ODD_PATHS = {
    "/v1//users/1": 404,
    "/v2//products": 404,
    "/v1//": 404,
    "//": 404,
    "//v1/users": 404,
    "/%2F": 404,
    "/v1/%2F": 404,
    "/v1/%2Fusers": 404,
    "/v1/users/1/": 404,
    "/v1/users/": 404,
    "/v1/users//": 404,
    "/v1/users/1//orders": 404,
    "/users/": 404,
    "/v1": 404,
    "/v1/": 404,
    "/v1/openapi.json/": 404,
    "/.well-known/jwks.json/": 404,
    "/v1/ui": 307,
}


def test_an_odd_path_is_404_and_never_names_the_host_it_was_sent_to(client, anonymous):
    for http, (path, status) in itertools.product((client, anonymous), ODD_PATHS.items()):
        # Given whole, the path is sent exactly as written (not as a network-path reference).
        response = http.get(
            f"http://testserver{path}", headers={"Host": HOST}, follow_redirects=False
        )
        assert response.status_code == status, (path, response.status_code, response.text)
        if status == 404:
            assert_problem(response, 404)
        else:
            location = response.headers["location"]
            assert location.startswith("/") and not location.startswith("//"), (path, location)
        echoed = [response.text, *response.headers.values()]
        assert not any(HOST in text for text in echoed), (path, response.headers)


# --- everything at once -----------------------------------------------------------------------

ODD_VALUES = [
    b"",
    b"\x00",
    b"null",
    b"true",
    b"-1",
    b"0",
    b"99999999999999999999999",
    b"1e999",
    b"NaN",
    b"%",
    b"a,b,,",
    b"-id,id",
    b"9999-12-31T23:59:59-05:00",
    b"0001-01-01T00:00:00+01:00",
    b"2026-02-30T10:00:00Z",
    b"\xff\xfe",
    b"\xed\xa0\x80",  # a UTF-8-encoded surrogate
]
query_values = st.one_of(
    st.sampled_from(ODD_VALUES),
    st.binary(max_size=24),
    st.text(max_size=24).map(lambda text: text.encode("utf-8", "surrogatepass")),
    st.integers().map(lambda number: str(number).encode()),
)
# One value may be long: past every length the contracts allow, and past SQLite's 50,000-byte
# LIKE patterns (a URL holds at most 65,536 characters).
long_values = st.integers(0, 60_000).map(lambda length: b"a" * length)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from([v.decode("latin-1") for v in ODD_VALUES]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
header_text = st.text(alphabet=string.printable[:95], max_size=40)  # no CR, LF or NUL
OTHER_MEDIA_TYPES = ["text/plain", "application/xml", "multipart/form-data; boundary=x", "*/*"]


def _quoted(text: str) -> str:
    """`text` percent-encoded as UTF-8, a lone surrogate as the bytes it would have been."""
    return quote(text.encode("utf-8", "surrogatepass"), safe="[]")


def _random_case(draw, text: str) -> str:
    return "".join(c.upper() if draw(st.booleans()) else c.lower() for c in text)


@st.composite
def requests(draw, ops):
    op = draw(st.sampled_from(ops))
    path_values = st.one_of(st.integers(-3, 3), st.integers(), st.text(min_size=1, max_size=8))
    path = op.template
    for name in [p["name"] for p in op.parameters if p["in"] == "path"]:
        value = str(draw(path_values)).encode("utf-8", "surrogatepass")
        path = path.replace(f"{{{name}}}", quote_from_bytes(value, safe=""))
    names = [p["name"] for p in op.query_parameters()]
    known = st.sampled_from(names) if names else st.nothing()
    pairs = draw(st.lists(st.tuples(known | st.text(max_size=8), query_values), max_size=4))
    pairs += draw(st.lists(st.tuples(known | st.just("x"), long_values), max_size=1))
    query = "&".join(f"{_quoted(name)}={quote_from_bytes(value)}" for name, value in pairs)
    headers = {}
    media_type = draw(
        st.none()
        | st.sampled_from([*op.bodies, *OTHER_MEDIA_TYPES] or OTHER_MEDIA_TYPES)
        | header_text
    )
    if media_type is not None:
        parameters = draw(st.sampled_from(["", "; charset=UTF-8", "; charset=latin-1", ";"]))
        headers["Content-Type"] = _random_case(draw, media_type) + parameters
    properties = list(next(iter(op.bodies.values()), {}).get("properties", {}))
    keys = st.sampled_from(properties) | st.text(max_size=8) if properties else st.text(max_size=8)
    body = draw(
        st.just(b"")
        | st.binary(max_size=64)
        | json_values.map(lambda value: json.dumps(value).encode())
        | st.dictionaries(keys, json_values, max_size=4).map(lambda d: json.dumps(d).encode())
        | st.lists(st.tuples(keys, query_values), max_size=4).map(
            lambda pairs: "&".join(f"{_quoted(k)}={quote_from_bytes(v)}" for k, v in pairs).encode()
        )
    )
    return op.method, f"http://testserver{path}?{query}", headers, body


@pytest.mark.slow
@pytest.mark.search  # as many examples as the Hypothesis profile gives
def test_no_request_built_from_the_contract_is_a_server_error(client):
    # Not the event stream: a request it accepts never ends, and this client reads a whole
    # answer. Schemathesis fuzzes its input over a live server (tests/test_contract.py).
    ops = [op for op in operations(client) if not op.streams]

    @settings(
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(request=requests(ops))
    def check(request):
        method, url, headers, body = request
        response = client.request(method, url, headers=headers, content=body)
        assert response.status_code < 500, (method, url, headers, body, response.text)

    check()


# --- patterns ---------------------------------------------------------------------------------

# Reads lines of [[pattern, [value, ...]], ...] and answers each with whether RegExp, as JSON
# Schema validators in JavaScript build it (the `u` flag), finds each pattern in its values.
_JAVASCRIPT_TESTS = """
const lines = require("readline").createInterface({input: process.stdin});
lines.on("line", (line) => {
  const answers = JSON.parse(line).map(([pattern, values]) => {
    const regexp = new RegExp(pattern, "u");
    return values.map((value) => regexp.test(value));
  });
  console.log(JSON.stringify(answers));
});
"""


def _near(value: str) -> list[str]:
    """`value` and what a client might send instead: line ends, other digits, other spaces."""
    return [
        value,
        value + "\n",
        value + "\r\n",
        "\n" + value,
        value + "\u2028",
        value.replace("1", "\N{ARABIC-INDIC DIGIT ONE}"),
        value.replace("2", "\N{SUPERSCRIPT TWO}"),
        value.replace(" ", "\ufeff").replace("a", "\N{LATIN SMALL LETTER A WITH ACUTE}"),
        value + " ",
    ]


@pytest.mark.slow  # node, and a search of each pattern's values
@ONE_DATABASE  # the contracts' patterns: the client only fetches the documents
def test_every_pattern_means_what_it_means_to_a_javascript_client(client):
    """JSON Schema's `pattern` is an ECMA-262 regular expression: under Python's `re` a `$`
    matched before a final newline, so a device token ending in one was taken, and jammed the
    push worker. Every pattern of the served contracts is held to JavaScript's RegExp, on values
    that match it and on those values with a line end, a Unicode digit or space added."""
    node = shutil.which("node")
    if node is None:
        if os.environ.get("CI"):
            pytest.fail("node is needed to hold the contracts' patterns to ECMA-262's RegExp")
        pytest.skip("node is not installed")
    contracts = [client.get(f"/v{version}/openapi.json").json() for version in (1, 2)]
    patterns = sorted(set().union(*map(contract_patterns, contracts)))
    assert len(patterns) > 20  # the contracts' own, and the list language's sort and fields
    javascript = subprocess.Popen(
        [node, "-e", _JAVASCRIPT_TESTS],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        encoding="utf-8",
    )

    # Forty values of each pattern, whatever the profile: each example draws one of every
    # pattern, and the differences between the two readings are in the forms, not in depth.
    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.data())
    def check(data):
        # One exchange with node an example, not one a pattern: on a busy machine each waits
        # for both processes to be scheduled, and a thousand took most of a minute.
        tried = [
            (pattern, _near(data.draw(st.from_regex(pattern, fullmatch=True), label=pattern)))
            for pattern in patterns
        ]
        javascript.stdin.write(json.dumps(tried) + "\n")
        javascript.stdin.flush()
        answers = json.loads(javascript.stdout.readline())
        for (pattern, values), expected in zip(tried, answers, strict=True):
            found = [bool(ecma_regex(pattern).search(value)) for value in values]
            assert found == expected, (pattern, values)

    try:
        check()
    finally:
        javascript.stdin.close()
        javascript.wait(timeout=30)
