"""Every response, whichever layer of the stack produced it, carries the CORS headers, is counted
in /metrics under its operation, method and status, and is logged as one JSON line with its
request id; slow ones are also warned about, counted and alerted on.

The matrix covers one response of each kind: Connexion's security (401, 403), validation (400,
415), routing (405) and CORS (preflight) answer before Flask; the body limit (413) and the rate
limiter (429) are our middleware; 200, 201 and 404 come from the handlers.
"""

import http.server
import json
import pathlib
import re
import threading
import time
import uuid

import pytest
import yaml
from support.helpers import assert_problem, bearer, bearer_for, create_user
from support.metrics_text import label_values, sample_sum

ORIGIN = "https://app.example.com"
METRICS_TOKEN = "metrics-token-for-tests"
SCRAPE = {"Authorization": f"Bearer {METRICS_TOKEN}"}
# 0.1 makes the token endpoint's limit 2 a minute, so the third call is a 429.
SCALE = 0.1


def _new_product() -> dict:
    return {"sku": f"OBS-{uuid.uuid4().hex[:8].upper()}", "name": "Mug", "price_cents": 900}


def _ok(client, headers):
    return client.get("/v1/products", headers=headers)


def _created(client, headers):
    return client.post("/v1/products", json=_new_product(), headers=headers)


def _bad_request(client, headers):
    return client.get("/v1/products?per_page=0", headers=headers)


def _unauthorized(client, headers):
    return client.get("/v1/products", headers={**headers, "Authorization": "Bearer not-a-jwt"})


def _forbidden(client, headers):
    return client.get("/v1/users", headers={**headers, **bearer(scopes=["products:read"])})


def _not_found(client, headers):
    return client.get("/v1/products/987654", headers=headers)


def _method_not_allowed(client, headers):
    return client.delete("/v1/products", headers=headers)


def _too_large(client, headers):
    body = json.dumps({**_new_product(), "name": "x" * 2_000_000})
    return client.post(
        "/v1/products", content=body, headers={**headers, "Content-Type": "application/json"}
    )


def _unsupported_media_type(client, headers):
    return client.post(
        "/v1/products", content="sku=1", headers={**headers, "Content-Type": "text/plain"}
    )


def _too_many(client, headers):
    # Each attempt on an account of its own: the address's limit is reached, not an account's.
    def form(n):
        return {"grant_type": "password", "username": f"nobody{n}@example.com", "password": "x"}

    warm_up = {k: v for k, v in headers.items() if k != "X-Request-ID"}
    for n in range(2):  # the limit: 2 a minute per address
        assert client.post("/v1/oauth/token", data=form(n), headers=warm_up).status_code == 400
    return client.post("/v1/oauth/token", data=form(2), headers=headers)


def _not_acceptable(client, headers):
    return client.get("/products", headers={**headers, "Accept": "application/vnd.shopapi.v7+json"})


def _unversioned(client, headers):
    return client.get("/products", headers={**headers, "Accept": "application/json; version=2"})


def _preflight(client, headers):
    request_headers = {
        **headers,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    }
    return client.options("/v1/products", headers=request_headers)


MATRIX = [
    # (make the request, status, method, operation label, route in the log)
    (_ok, 200, "GET", "list_products", "/v1/products"),
    (_created, 201, "POST", "create_product", "/v1/products"),
    (_bad_request, 400, "GET", "list_products", "/v1/products"),
    (_unauthorized, 401, "GET", "list_products", "/v1/products"),
    (_forbidden, 403, "GET", "list_users", "/v1/users"),
    (_not_found, 404, "GET", "get_product", "/v1/products/{id}"),
    (_method_not_allowed, 405, "DELETE", "none", None),
    (_too_large, 413, "POST", "create_product", "/v1/products"),
    (_unsupported_media_type, 415, "POST", "create_product", "/v1/products"),
    (_too_many, 429, "POST", "issue_token", "/v1/oauth/token"),
    (_not_acceptable, 406, "GET", "none", None),
    (_unversioned, 200, "GET", "list_products", "/v2/products"),
    (_preflight, 200, "OPTIONS", "preflight", None),
]


NEVER_SLOW_MS = 600_000


def _log_lines(captured: str) -> list[dict]:
    return [json.loads(line) for line in captured.splitlines() if line.startswith("{")]


@pytest.fixture
def observed(app_with):
    # No request here is slow, however busy the machine (a slow one logs a second line): the
    # threshold has its own tests, with slow_request_ms=0 below.
    app = app_with(
        cors_origins=(ORIGIN,),
        metrics_token=METRICS_TOKEN,
        rate_limit_scale=SCALE,
        slow_request_ms=NEVER_SLOW_MS,
    )
    return app.test_client()


@pytest.mark.parametrize(
    ("make_request", "status", "method", "operation", "route"),
    MATRIX,
    ids=[f"{case[1]}-{case[0].__name__.strip('_')}" for case in MATRIX],
)
def test_every_response_has_cors_headers_a_metric_and_a_log_line(
    observed, capsys, make_request, status, method, operation, route
):
    request_id = f"matrix-{uuid.uuid4().hex}"
    labels = {"operation": operation, "method": method, "status": str(status)}
    before = sample_sum(
        observed.get("/metrics", headers=SCRAPE).text, "http_requests_total", **labels
    )
    capsys.readouterr()

    headers = {**bearer(), "Origin": ORIGIN, "X-Request-ID": request_id}
    response = make_request(observed, headers)

    assert response.status_code == status, response.text
    assert response.headers["x-request-id"] == request_id
    assert response.headers["access-control-allow-origin"] == ORIGIN
    assert "Origin" in response.headers["vary"]
    if method != "OPTIONS":
        exposed = response.headers["access-control-expose-headers"]
        assert {
            "X-Request-ID",
            "RateLimit-Remaining",
            "Retry-After",
            "Location",
            "API-Version",
        } <= {h.strip() for h in exposed.split(",")}
        # One Vary field naming both, whichever layer made the response.
        [vary] = response.headers.get_list("vary")
        assert {name.strip() for name in vary.split(",")} == {"Origin", "Accept"}
        if status != 406:
            version = route.split("/")[1].removeprefix("v") if route else "1"
            assert response.headers["api-version"] == version
    if status >= 400 and method != "OPTIONS":
        assert_problem(response, status)

    after = sample_sum(
        observed.get("/metrics", headers=SCRAPE).text, "http_requests_total", **labels
    )
    assert after == before + 1

    lines = [
        line for line in _log_lines(capsys.readouterr().out) if line.get("request_id") == request_id
    ]
    requests = [line for line in lines if line["logger"] == "shopapi.requests"]
    assert len(requests) == 1, lines
    [line] = requests
    assert line["level"] == "info"
    assert (line["method"], line["status"], line["operation"]) == (method, status, operation)
    assert line["route"] == route
    assert line["path"] == response.request.url.path  # as sent, before any version is added
    assert isinstance(line["duration_ms"], float | int) and line["duration_ms"] >= 0
    assert line["user_agent"] == "testclient"
    assert line["time"].endswith("+00:00")


def test_a_log_line_names_the_client_but_never_a_credential_or_a_body(observed, capsys):
    token_headers = bearer(subject="client:log-test")
    secret_password = "a-password-nobody-may-log"
    capsys.readouterr()
    response = observed.post(
        "/v1/users",
        json={"email": "logged@example.com", "name": "L", "password": secret_password},
        headers=token_headers,
    )
    assert response.status_code == 201
    form = {"grant_type": "password", "username": "logged@example.com", "password": secret_password}
    assert observed.post("/v1/oauth/token", data=form).status_code == 200
    out = capsys.readouterr().out
    [created] = [line for line in _log_lines(out) if line.get("operation") == "create_user"]
    assert created["client"] == "client:log-test"
    assert created["client_address"] == "testclient"
    token = token_headers["Authorization"].removeprefix("Bearer ")
    for secret in (secret_password, token, "logged@example.com"):
        assert secret not in out


def test_metrics_take_the_metrics_token(observed):
    assert_problem(observed.get("/metrics"), 401)
    assert_problem(observed.get("/metrics", headers={"Authorization": "Bearer wrong"}), 401)
    scrape = observed.get("/metrics", headers=SCRAPE)
    assert scrape.status_code == 200
    assert scrape.headers["content-type"].startswith("text/plain")
    assert "# TYPE http_request_duration_seconds histogram" in scrape.text
    assert "http_requests_in_flight" in scrape.text


def _clients(app) -> tuple:
    """A client with an admin OAuth client's token, to set things up, and one without any."""
    admin = app.test_client()
    admin.headers.update(bearer())
    return admin, app.test_client()


def _admin_reads_metrics(client, headers) -> None:
    scrape = client.get("/metrics", headers=headers)
    assert scrape.status_code == 200, scrape.text
    assert scrape.headers["content-type"].startswith("text/plain")
    assert "http_requests_total" in scrape.text


def test_an_admin_reads_the_metrics_without_any_metrics_token(app_with):
    # The settings of a default `make run`: no METRICS_TOKEN.
    setup, client = _clients(app_with())
    admin = create_user(setup, role="admin")
    customer = create_user(setup)
    _admin_reads_metrics(client, bearer_for(admin))
    _admin_reads_metrics(client, bearer())  # an admin OAuth client's token
    assert_problem(client.get("/metrics", headers=bearer_for(customer)), 403)
    assert_problem(client.get("/metrics"), 401)
    assert_problem(client.get("/metrics", headers=SCRAPE), 401)  # no token is set


def test_an_api_key_with_the_admin_scope_reads_the_metrics(app_with):
    setup, client = _clients(app_with(metrics_token=METRICS_TOKEN))
    admin = create_user(setup, role="admin")
    keys = {}
    for scopes in (["admin"], ["products:read"]):
        issued = setup.post(
            "/v1/api-keys", json={"name": "k", "scopes": scopes, "owner_id": admin["id"]}
        )
        assert issued.status_code == 201, issued.text
        keys[scopes[0]] = {"X-API-Key": issued.json()["key"]}
    _admin_reads_metrics(client, keys["admin"])
    assert_problem(client.get("/metrics", headers=keys["products:read"]), 403)
    _admin_reads_metrics(client, SCRAPE)


def test_latency_is_a_histogram_by_operation_method_and_status(observed):
    labels = {"operation": "list_products", "method": "GET", "status": "200"}
    text = observed.get("/metrics", headers=SCRAPE).text
    before = sample_sum(text, "http_request_duration_seconds_count", **labels)
    observed.get("/v1/products", headers=bearer())
    text = observed.get("/metrics", headers=SCRAPE).text
    assert sample_sum(text, "http_request_duration_seconds_count", **labels) == before + 1
    infinite = sample_sum(text, "http_request_duration_seconds_bucket", le="+Inf", **labels)
    assert infinite == before + 1


def test_a_method_outside_http_s_own_is_measured_as_other(observed, capsys):
    # Each method a client invents would otherwise be a label value, a time series, for good.
    unusual = ["PROPFIND", "MKCOL", "LOCK", f"X{uuid.uuid4().hex.upper()}"]
    labels = {"operation": "none", "method": "other", "status": "405"}
    before = sample_sum(
        observed.get("/metrics", headers=SCRAPE).text, "http_requests_total", **labels
    )
    capsys.readouterr()
    for method in unusual:
        assert_problem(observed.request(method, "/v1/products", headers=bearer()), 405)
    text = observed.get("/metrics", headers=SCRAPE).text
    assert sample_sum(text, "http_requests_total", **labels) == before + len(unusual)
    count = sample_sum(text, "http_request_duration_seconds_count", **labels)
    assert count >= len(unusual)
    standard = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"}
    assert label_values(text, "method") <= standard | {"other"}
    # The log line still says what was sent.
    logged = [line["method"] for line in _log_lines(capsys.readouterr().out)]
    assert logged[: len(unusual)] == unusual


class _AlertReceiver(http.server.BaseHTTPRequestHandler):
    """Keeps each alert posted to it, and holds its answer until the test releases it."""

    received: list
    release: threading.Event

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, self.headers["Content-Type"], json.loads(body)))
        self.release.wait(timeout=10)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def alert_receiver():
    handler = type("Receiver", (_AlertReceiver,), {"received": [], "release": threading.Event()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/api/v2/alerts", handler
    handler.release.set()
    server.shutdown()


def test_a_slow_request_is_warned_counted_and_alerted_without_waiting(
    app_with, alert_receiver, capsys
):
    url, receiver = alert_receiver
    # Every request is slower than 0 ms.
    client = app_with(slow_request_ms=0, metrics_token=METRICS_TOKEN, alert_webhook_url=url)
    client = client.test_client()
    labels = {"operation": "list_products", "method": "GET"}
    before = sample_sum(
        client.get("/metrics", headers=SCRAPE).text, "http_slow_requests_total", **labels
    )
    capsys.readouterr()

    response = client.get("/v1/products", headers={**bearer(), "X-Request-ID": "slow-one"})
    # The receiver holds its answer until released: this response did not wait for the alert.
    assert response.status_code == 200
    assert not receiver.release.is_set()

    warnings = [
        line
        for line in _log_lines(capsys.readouterr().out)
        if line["level"] == "warning" and line.get("request_id") == "slow-one"
    ]
    assert len(warnings) == 1
    assert warnings[0]["threshold_ms"] == 0 and warnings[0]["operation"] == "list_products"
    after = sample_sum(
        client.get("/metrics", headers=SCRAPE).text, "http_slow_requests_total", **labels
    )
    assert after == before + 1

    receiver.release.set()
    alerts = []
    deadline = time.monotonic() + 60  # the alert is posted from another thread: waited for
    while time.monotonic() < deadline:
        alerts = [
            (path, content_type, alert)
            for path, content_type, posted in receiver.received
            for alert in posted
            if alert["labels"]["operation"] == "list_products"
        ]
        if alerts:
            break
        threading.Event().wait(0.05)
    [(path, content_type, alert)] = alerts
    assert path == "/api/v2/alerts" and content_type == "application/json"
    assert alert["labels"]["alertname"] == "SlowRequest"
    assert alert["labels"]["severity"] == "warning"
    assert alert["annotations"]["request_id"] == "slow-one"
    assert alert["startsAt"] < alert["endsAt"]


def test_requests_under_the_threshold_are_not_slow(observed):
    labels = {"operation": "list_products", "method": "GET"}
    before = sample_sum(
        observed.get("/metrics", headers=SCRAPE).text, "http_slow_requests_total", **labels
    )
    observed.get("/v1/products", headers=bearer())
    after = sample_sum(
        observed.get("/metrics", headers=SCRAPE).text, "http_slow_requests_total", **labels
    )
    assert after == before


def test_every_metric_the_alert_rules_use_is_exported(observed):
    rules = pathlib.Path(__file__).parent.parent / "ops" / "prometheus" / "alerts.yml"
    expressions = [
        rule["expr"]
        for group in yaml.safe_load(rules.read_text())["groups"]
        for rule in group["rules"]
    ]
    used = {
        re.sub(r"_(bucket|count|sum)$", "", name)
        for expr in expressions
        for name in re.findall(r"\b(http_\w+|rate_limit_\w+)\b", expr)
    }
    scrape = observed.get("/metrics", headers=SCRAPE).text
    for name in used:
        assert re.search(rf"^# TYPE {name.removesuffix('_total')}(_total)? ", scrape, re.M), name
