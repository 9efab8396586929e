"""The Swagger UI at /v1/ui/ works for a person in a real browser (headless Chromium): they can
authorise with the password flow or an API key, as the page's description tells them to, and
"Try it out" reaches the live API, with the answer shown in the page. Every list, and replacing or
changing a product, works with the values Swagger UI fills in from the contract's examples: a
reader tries an operation before reading its parameters."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from support.contract_walk import follow_ref
from support.helpers import ONE_DATABASE
from support.live import live_server

from models.db import database, open_database, use
from shopapi.events.worker import fan_out

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # reported by the `browser` fixture, which knows whether this is CI
    sync_playwright = None
if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page, Request

pytestmark = pytest.mark.slow

ADMIN = {"ADMIN_EMAIL": "ui-admin@example.com", "ADMIN_PASSWORD": "ui-admin-pass"}
TIMEOUT_MS = 15_000


def _unavailable(reason: str):
    # CI installs Chromium and playwright, so a missing one there is a broken job, not a skip.
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run the browser tests", pytrace=False)
    pytest.skip(reason)


def _chromium() -> str | None:
    # Debian's headless shell first: the engine Playwright's own headless mode runs, without the
    # whole browser around it (a sixth less CPU over these tests); else the browser itself.
    candidates = ("/usr/bin/chromium-headless-shell", "/usr/bin/chromium", shutil.which("chromium"))
    for path in candidates:
        if path and os.path.exists(path):
            return path
    return None


@pytest.fixture(scope="module")
def browser():
    if sync_playwright is None:
        _unavailable("the playwright package is not installed")
    executable = _chromium()
    if executable is None:
        _unavailable("Chromium is not installed (chromium-headless-shell, or chromium)")
    # Playwright's own browser builds cannot be downloaded here; the distribution's Chromium
    # does. No sandbox, because the tests may run as root.
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, headless=True, args=["--no-sandbox"]
        )
        expect.set_options(timeout=TIMEOUT_MS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    # Whatever a test does, the page's Content-Security-Policy refuses nothing it needs.
    refused = []
    page.on(
        "console",
        lambda message: (
            refused.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    yield page
    context.close()
    assert refused == []


def admin_token(base: str) -> str:
    response = httpx.post(
        f"{base}/v1/oauth/token",
        data={
            "grant_type": "password",
            "username": ADMIN["ADMIN_EMAIL"],
            "password": ADMIN["ADMIN_PASSWORD"],
        },
    )
    assert response.status_code == 200, response.text
    return response.json()["access_token"]


def open_authorize_dialog(page, base: str, version: str = "v1"):
    page.goto(f"{base}/{version}/ui/")
    page.get_by_role("button", name="Authorize").click()
    dialog = page.locator(".modal-ux")
    expect(dialog.get_by_role("heading", name="Available authorizations")).to_be_visible()
    return dialog


def close_dialog(page, dialog):
    dialog.get_by_role("button", name="Close").first.click()
    expect(dialog).to_have_count(0)


def authorise_with_password(page, base: str, version: str = "v1"):
    """Authorize under `oauth2 (password)` as a person would: email, password, every scope, and
    the rest of the form (client id, secret and where they go) left as Swagger UI offers it."""
    dialog = open_authorize_dialog(page, base, version)
    section = dialog.locator(".auth-container").filter(
        has=page.get_by_role("heading", name="oauth2 (OAuth2, password)")
    )
    section.get_by_label("username:").fill(ADMIN["ADMIN_EMAIL"])
    section.get_by_label("password:").fill(ADMIN["ADMIN_PASSWORD"])
    section.get_by_text("select all").click()

    # What Swagger UI sent to the token endpoint and what came back, for the failure message: a
    # 401 carrying `WWW-Authenticate: Basic` makes the browser hold the answer back for its own
    # sign-in prompt, so the page would show nothing at all. Form field names only.
    exchanges = []
    token_url = f"{base}/v1/oauth/token"

    def sent(request):
        if request.url == token_url:
            form = sorted(pair.split("=")[0] for pair in (request.post_data or "").split("&"))
            authorization = request.headers.get("authorization")
            exchanges.append({"authorization": authorization, "form": form, "status": None})

    def answered(response):
        if response.url == token_url and exchanges:
            exchanges[-1]["status"] = response.status

    page.on("request", sent)
    page.on("response", answered)
    section.get_by_role("button", name="Authorize").click()
    try:
        expect(section.get_by_role("button", name="Logout")).to_be_visible()
    except AssertionError:
        raise AssertionError(
            f"Swagger UI's password flow did not authorise; token requests: {exchanges}"
        ) from None
    expect(section.get_by_role("heading", name="Authorized")).to_be_visible()
    close_dialog(page, dialog)


@pytest.fixture(scope="module")
def base(database_url, tmp_path_factory):
    """One live server for the module: starting one is most of a test's time. It holds one of
    everything (the `reader` fixture seeds it, a Web Push device included); a test that adds
    rows finds its own by key."""
    vapid_key = tmp_path_factory.mktemp("vapid") / "vapid.pem"
    key = ec.generate_private_key(ec.SECP256R1())
    vapid_key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    web_push = {"VAPID_PRIVATE_KEY_FILE": str(vapid_key), "VAPID_SUBJECT": "mailto:ui@example.com"}
    with live_server(database_url, WEBHOOK_ALLOW_PRIVATE="1", **web_push, **ADMIN) as base:
        yield base


def try_it_out(
    page, operation_id: str, body: dict | None = None, *, tag: str = "products", choose=None
) -> str:
    """Run an operation from its panel and return the status the page shows for the live
    response; `choose(operation)` fills in its parameters. The panel is left closed and out of
    "Try it out", as the other tests expect it."""
    operation = page.locator(f"#operations-{tag}-{operation_id}")
    operation.locator(".opblock-summary").click()
    operation.get_by_role("button", name="Try it out").click()
    if body is not None:
        # The textarea holds the schema's example; replace it.
        operation.locator("textarea.body-param__text").fill(json.dumps(body))
    if choose is not None:
        choose(operation)
    operation.get_by_role("button", name="Execute").click()
    status = operation.locator(".live-responses-table tbody .response-col_status")
    expect(status).to_have_count(1)
    shown = status.inner_text().strip()
    # Swagger UI keeps a panel in "Try it out" after it is closed: leave it as it was found.
    operation.get_by_role("button", name="Cancel").click()
    operation.locator(".opblock-summary").click()
    expect(operation.locator(".opblock-body")).to_have_count(0)
    return shown


@ONE_DATABASE
def test_a_person_authorises_with_a_password_and_creates_a_product(base, page):
    product = {"sku": "UI-TEST-1", "name": "From the browser", "price_cents": 1250, "stock": 3}
    authorise_with_password(page, base)

    # (Listing with the page's values is the reader's tests' job, below.)
    assert try_it_out(page, "create_product", product) == "201"

    # The page saying 201 is not the product existing: ask the API itself.
    listed = httpx.get(
        f"{base}/v1/products",
        params={"sku": product["sku"]},
        headers={"Authorization": f"Bearer {admin_token(base)}"},
    )
    assert listed.status_code == 200, listed.text
    assert [{key: item[key] for key in product} for item in listed.json()["data"]] == [product]


@ONE_DATABASE
def test_a_partner_authorises_with_an_api_key(base, page):
    issued = httpx.post(
        f"{base}/v1/api-keys",
        json={"name": "ui", "scopes": ["products:read"]},
        headers={"Authorization": f"Bearer {admin_token(base)}"},
    )
    assert issued.status_code == 201, issued.text

    dialog = open_authorize_dialog(page, base)
    section = dialog.locator(".auth-container").filter(
        has=page.get_by_text("X-API-Key", exact=True)
    )
    section.get_by_role("textbox").fill(issued.json()["key"])
    section.get_by_role("button", name="Authorize").click()
    expect(section.get_by_role("button", name="Logout")).to_be_visible()
    close_dialog(page, dialog)

    assert try_it_out(page, "list_products") == "200"


@ONE_DATABASE
def test_a_person_syncs_a_batch_and_expands_an_order_in_the_v3_docs(base, page):
    authorise_with_password(page, base, "v3")
    price = {"amount": "2.50", "currency": "EUR"}
    batch = {"products": [{"sku": "UI-V3-1", "name": "From a batch", "price": price, "stock": 4}]}
    assert try_it_out(page, "upsert_products", batch) == "200"

    with httpx.Client(
        base_url=f"{base}/v3", headers={"Authorization": f"Bearer {admin_token(base)}"}
    ) as api:
        [product] = api.get("/products", params={"sku": "UI-V3-1"}).json()["data"]
        assert product["price"] == price  # the page's 200 was the product stored
        user = {"email": "ui-v3@example.com", "name": "V3", "password": "correct horse"}
        customer = api.post("/users", json=user).json()
        items = [{"product_id": product["id"], "quantity": 1}]
        order = api.post("/orders", json={"user_id": customer["id"], "items": items}).json()

    def expand_everything(operation):
        operation.locator('tr[data-param-name="id"] input').fill(str(order["id"]))
        expand = operation.locator('tr[data-param-name="expand"] select')
        expand.select_option(["user", "items.product"])

    sent = []
    page.on("request", lambda request: sent.append(request.url))
    assert try_it_out(page, "get_order", tag="orders", choose=expand_everything) == "200"
    [url] = [u for u in sent if urlsplit(u).path == f"/v3/orders/{order['id']}"]
    assert "expand=user%2Citems.product" in url or "expand=user,items.product" in url, url


# What a reader sees first: a laptop's screen, below the browser's own bars.
FIRST_SCREEN = {"width": 1280, "height": 720}


@ONE_DATABASE
@pytest.mark.parametrize("version", ["v1", "v2", "v3"])
def test_authorize_is_on_the_first_screen(base, browser, version):
    """The page opens on a short introduction and the Authorize button, not on the conventions:
    those are one link away (docs/api.md, docs/list-language.md)."""
    context = browser.new_context(viewport=FIRST_SCREEN)
    try:
        page = context.new_page()
        page.goto(f"{base}/{version}/ui/")
        authorize = page.locator(".auth-wrapper").get_by_role("button", name="Authorize")
        expect(authorize).to_be_visible()
        box = authorize.bounding_box()
        print(f"/{version}/ui/: Authorize at {box['y']:.0f} px")
        assert box["y"] + box["height"] <= FIRST_SCREEN["height"], (
            f"Authorize is {box['y']:.0f} px down /{version}/ui/, below the first screen"
        )
    finally:
        context.close()


@ONE_DATABASE
def test_authorization_outlives_a_reload(base, page):
    """Swagger UI keeps the reader's authorization (persistAuthorization) across a reload, so
    "Try it out" still sends it."""
    authorise_with_password(page, base)
    page.reload()
    dialog = open_authorize_dialog(page, base)
    section = dialog.locator(".auth-container").filter(
        has=page.get_by_role("heading", name="oauth2 (OAuth2, password)")
    )
    expect(section.get_by_role("button", name="Logout")).to_be_visible()
    close_dialog(page, dialog)
    assert try_it_out(page, "list_products") == "200"


def _stored(page) -> str:
    """Everything the page keeps in the browser's storage, as one string."""
    return page.evaluate(
        "() => JSON.stringify([Object.entries(localStorage), Object.entries(sessionStorage)])"
    )


@ONE_DATABASE
def test_the_browser_keeps_no_password_and_no_refresh_token(base, page):
    """persistAuthorization would keep the password flow's whole state in localStorage, the
    password and the 14-day refresh token included: only the access token is kept."""
    issued = []

    def token_answered(response):
        if response.url == f"{base}/v1/oauth/token" and response.status == 200:
            issued.append(response.json())

    page.on("response", token_answered)
    authorise_with_password(page, base)
    [tokens] = issued
    for moment in ("authorised", "reloaded"):
        stored = _stored(page)
        assert ADMIN["ADMIN_PASSWORD"] not in stored, moment
        assert tokens["refresh_token"] not in stored, moment
        assert tokens["access_token"] in stored, moment  # what a reload keeps
        page.reload()
    assert try_it_out(page, "list_products") == "200"


@ONE_DATABASE
def test_a_password_an_earlier_page_kept_is_forgotten_on_the_next_load(base, page):
    page.goto(f"{base}/v1/ui/")
    earlier = {
        "oauth2": {
            "name": "oauth2",
            "schema": {"type": "oauth2", "flow": "password"},
            "username": ADMIN["ADMIN_EMAIL"],
            "password": ADMIN["ADMIN_PASSWORD"],
            "token": {"access_token": admin_token(base), "refresh_token": "shr_earlier"},
        },
        "apiKey": {"name": "apiKey", "schema": {"type": "apiKey"}, "value": "shk_earlier"},
    }
    page.evaluate("(value) => localStorage.setItem('authorized', value)", json.dumps(earlier))
    page.reload()
    expect(page.get_by_role("button", name="Authorize")).to_be_visible()
    stored = _stored(page)
    for secret in (ADMIN["ADMIN_PASSWORD"], "shr_earlier", "shk_earlier"):
        assert secret not in stored
    assert earlier["oauth2"]["token"]["access_token"] in stored


def _measured(parameters: Locator) -> str:
    rows = parameters.locator("tr[data-param-name]").count()
    height = parameters.bounding_box()["height"]
    page = parameters.page.evaluate("document.documentElement.scrollHeight")
    return f"{rows} parameters, {height:.0f} px (the page: {page} px)"


@ONE_DATABASE
def test_the_products_list_in_try_it_out_folds_its_operator_filters(base, page):
    """GET /products in "Try it out" shows its everyday parameters and folds the operator filters
    (`price_cents[gte]`, ...) behind one button: a reader is not made to scroll past 84 inputs to
    reach Execute. Every filter is one click away, and still in the contract."""
    page.goto(f"{base}/v1/ui/")
    operation = page.locator("#operations-products-list_products")
    operation.locator(".opblock-summary").click()
    operation.get_by_role("button", name="Try it out").click()
    expect(operation.get_by_role("button", name="Execute")).to_be_visible()
    parameters = operation.locator(".opblock-section").first
    price_from = parameters.locator('tr[data-param-name="price_cents[gte]"]')
    print(f"GET /products in Try it out, folded: {_measured(parameters)}")
    assert parameters.bounding_box()["height"] <= 3 * page.viewport_size["height"]
    expect(price_from).to_have_count(0)

    operation.get_by_role("button", name=re.compile(r"^Show the \d+ operator filters")).click()
    expect(price_from).to_have_count(1)
    print(f"unfolded: {_measured(parameters)}")

    # A filter given a value stays shown, folded or not: what Execute sends is on the page.
    price_from.locator("input").fill("100")
    operation.get_by_role("button", name="Hide the operator filters").click()
    expect(price_from).to_have_count(1)
    expect(parameters.locator('tr[data-param-name="price_cents[lte]"]')).to_have_count(0)


# A docs reader's "Try it out": every list, and replacing or changing a product, run with the
# values Swagger UI fills in from the contract's examples. The tests share one live server (with
# its seeded rows), one browser page and one login.

# Headers that make a request conditional or replayable: a value Swagger UI fills in for one is
# sent with every "Try it out" (a stale If-Match is a 412, If-None-Match a 304 with no body, a
# fixed Idempotency-Key replays someone else's answer).
UNASKED_HEADERS = ("if-match", "if-none-match", "idempotency-key")
# The lists of v1, as test_list_operations_tried_are_the_contracts checks against the served
# contract: named here so that each one passes or fails on its own.
LIST_PATHS = (
    "/users",
    "/users/{id}/orders",
    "/products",
    "/orders",
    "/oauth/clients",
    "/api-keys",
    "/events",
    "/webhooks",
    "/webhooks/{webhook_id}/deliveries",
    "/users/{user_id}/devices",
    "/users/{user_id}/devices/{device_id}/deliveries",
    # Not a list, but a GET a reader runs without choosing anything first.
    "/push/vapid-public-key",
)
# The browser's own headers, left out of failure messages.
BROWSER_HEADERS = ("user-agent", "referer", "sec-", "accept-encoding", "accept-language")


@dataclasses.dataclass
class DocsReader:
    """A signed-in docs page on a live server holding one of everything, and what it sent."""

    page: Page
    contract: dict  # as served at /v1/openapi.json
    api: httpx.Client  # an admin's, for what the API answers outside the page
    path_ids: dict[str, dict[str, int]]  # path -> the seeded ids its path parameters take
    sent: list[Request]  # every request the page made, in order


def _seed(api: httpx.Client, database_url: str) -> dict[str, dict[str, int]]:
    """One of everything, so that no list is empty (an empty list would hide a pre-filled filter
    that matches nothing): a webhook, a product (and its `product.created` event), a customer
    with an order and a device, an OAuth client, an API key, a delivery of the event, and the
    push deliveries of the customer's events (the worker's fan-out, run here). Returns the ids
    the path parameters take."""

    def created(response: httpx.Response) -> dict:
        assert response.status_code == 201, response.text
        return response.json()

    # 127.0.0.1 takes a webhook only with WEBHOOK_ALLOW_PRIVATE; nothing is delivered to it, as
    # the live server runs no worker.
    hook = {"url": "http://127.0.0.1:9/shopapi-hook", "events": ["product.created"]}
    webhook = created(api.post("/webhooks", json=hook))
    product = created(
        api.post(
            "/products",
            json={"sku": "UI-READER-1", "name": "Docs reader's", "price_cents": 990, "stock": 5},
        )
    )
    customer = created(
        api.post(
            "/users",
            json={"email": "ui-reader@example.com", "name": "Reader", "password": "correct horse"},
        )
    )
    order = {"user_id": customer["id"], "items": [{"product_id": product["id"], "quantity": 1}]}
    created(api.post("/orders", json=order))
    created(api.post("/oauth/clients", json={"name": "Reader's", "scopes": ["products:read"]}))
    created(api.post("/api-keys", json={"name": "Reader's", "scopes": ["products:read"]}))
    events = api.get("/events", params={"type": "product.created", "per_page": 100})
    assert events.status_code == 200, events.text
    [event] = [e for e in events.json()["data"] if e["resource_id"] == product["id"]]
    created(api.post(f"/webhooks/{webhook['id']}/deliveries", json={"event_id": event["id"]}))
    device = created(
        api.post(f"/users/{customer['id']}/devices", json={"platform": "fcm", "token": "ui-1"})
    )
    _fan_out(database_url)
    return {
        "/users/{user_id}/devices": {"user_id": customer["id"]},
        "/users/{user_id}/devices/{device_id}/deliveries": {
            "user_id": customer["id"],
            "device_id": device["id"],
        },
        "/users/{id}/orders": {"id": customer["id"]},
        "/webhooks/{webhook_id}/deliveries": {"webhook_id": webhook["id"]},
        "/products/{id}": {"id": product["id"]},
    }


def _fan_out(database_url: str) -> None:
    """The worker's fan-out, once, on the live server's database."""
    db = open_database(database_url)
    previous = database.obj
    use(db)
    try:
        fan_out()
    finally:
        use(previous)
        db.close()


@pytest.fixture(scope="module")
def reader(browser, base, database_url):
    with (
        httpx.Client(
            base_url=f"{base}/v1", headers={"Authorization": f"Bearer {admin_token(base)}"}
        ) as api,
    ):
        path_ids = _seed(api, database_url)
        contract = api.get("/openapi.json").json()
        context = browser.new_context(viewport={"width": 1280, "height": 1000})
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        sent = []
        # A function of Python's own, such as `sent.append`, is no handler to playwright.
        page.on("request", lambda request: sent.append(request))
        authorise_with_password(page, base)
        yield DocsReader(page, contract, api, path_ids, sent)
        context.close()


def _property_names(contract: dict, schema: dict) -> set[str]:
    schema = follow_ref(contract, schema)
    names = set(schema.get("properties", {}))
    for part in schema.get("allOf", []):
        names |= _property_names(contract, part)
    return names


def list_operations(contract: dict) -> list[str]:
    """The paths whose GET a reader runs without choosing a resource first: every GET of a path
    with no path parameter, and the lists below a resource (their 200 body has `data` and
    `meta`, or they take `per_page`)."""
    paths = []
    for path, item in contract["paths"].items():
        operation = item.get("get")
        if operation is None:
            continue
        parameters = item.get("parameters", []) + operation.get("parameters", [])
        takes_per_page = any(follow_ref(contract, p)["name"] == "per_page" for p in parameters)
        ok = follow_ref(contract, operation["responses"].get("200", {}))
        if "text/event-stream" in ok.get("content", {}):
            continue  # the event stream: Swagger UI shows an answer once it ends, and it never does
        body = ok.get("content", {}).get("application/json", {}).get("schema", {})
        is_a_page = {"data", "meta"} <= _property_names(contract, body)
        if "{" not in path or takes_per_page or is_a_page:
            paths.append(path)
    return paths


def _values(fields: Locator) -> list[list[str]]:
    """Fields that hold a value, each as [in, name, value, why Swagger UI refuses it]; the request
    body's is in "body"."""
    return fields.evaluate_all(
        """fields => fields.filter(field => field.value).map(field => {
            const row = field.closest("tr[data-param-name]")
            return [row?.dataset.paramIn ?? "body", row?.dataset.paramName ?? "", field.value,
                    field.title]
        })"""
    )


def _panel(reader: DocsReader, method: str, path: str) -> Locator:
    """The operation's panel in the page. Swagger UI shows an operation under each of its tags;
    the first will do."""
    definition = reader.contract["paths"][path][method.lower()]
    operation_id = f"operations-{definition['tags'][0]}-{definition['operationId']}"
    return reader.page.locator(f'[id="{operation_id}"]')


@dataclasses.dataclass(frozen=True)
class Execution:
    """What one "Try it out" sent, and what the page showed of the answer."""

    request: Request
    shown_status: str
    shown_body: str | None  # the response body's text, when the page shows one

    def problems(self) -> list[str]:
        """What is wrong: an answer other than 2xx, or a header only its sender should choose."""
        problems = []
        if not re.fullmatch(r"2\d\d", self.shown_status):
            problems.append(f"the page shows {self.shown_status}, not 2xx")
        headers = self.request.all_headers()
        if unasked := {name: headers[name] for name in UNASKED_HEADERS if name in headers}:
            problems.append(f"pre-filled headers were sent: {unasked}")
        return problems

    def report(self) -> str:
        """The request and its answer, as a failure message shows them: what the contract's
        examples put into the request is what needs fixing."""
        headers = {
            name: "Bearer …" if name == "authorization" else value
            for name, value in self.request.all_headers().items()
            if not name.startswith(BROWSER_HEADERS)
        }
        lines = [f"{self.request.method} {self.request.url}", f"headers: {headers}"]
        if self.request.post_data:
            lines.append(f"body: {self.request.post_data}")
        response = self.request.response()
        if response is not None:
            lines.append(f"answer: {response.status} {response.text()}")
        return "\n".join(lines)


def run_as_prefilled(reader: DocsReader, method: str, path: str) -> Execution:
    """Open the operation, "Try it out", fill in only the path parameters (with seeded ids: a
    reader picks the resource) and Execute. Every other field, the request body included, stays
    as Swagger UI filled it. The operation is closed again: Swagger UI slows to a crawl with
    several lists' ~80 parameter fields open at once."""
    operation = _panel(reader, method, path)
    operation.locator(".opblock-summary").click()
    try:
        return _execute(reader, operation, method, path)
    finally:
        operation.locator(".opblock-summary").click()
        expect(operation.locator(".opblock-body")).to_have_count(0)


def _execute(reader: DocsReader, operation: Locator, method: str, path: str) -> Execution:
    operation.get_by_role("button", name="Try it out").click()
    expect(operation.get_by_role("button", name="Execute")).to_be_visible()
    ids = reader.path_ids.get(path, {})
    for name, value in ids.items():
        field = operation.locator(f'tr[data-param-name="{name}"][data-param-in="path"] input')
        # Swagger UI leaves out a path-level parameter when the operation has one of the same
        # name, whatever its `in` (once `$ref`s are resolved): the `id` filter of
        # /users/{id}/orders would hide the `id` of its path, leaving nowhere to type the id.
        same_name = operation.locator(f'tr[data-param-name="{name}"]')
        assert field.count() == 1, (
            f"{method} {path} has no field for the path parameter {name!r}, only for "
            f"{same_name.evaluate_all('rows => rows.map(row => row.dataset.paramIn)')} ones"
        )
        field.fill(str(value))
        expect(field).to_have_value(str(value))

    already_sent = len(reader.sent)
    operation.get_by_role("button", name="Execute").click()
    answer = operation.locator(".live-responses-table tbody")
    status = answer.locator(".response-col_status")
    # Swagger UI sends nothing when a filled-in value breaks its parameter's schema: it marks the
    # field instead.
    refused = operation.locator("input.invalid, select.invalid, textarea.invalid")
    expect(status.or_(refused).first).to_be_visible()
    assert status.count() == 1, (
        f"Swagger UI sent no {method} {path}: it refused the fields (in, name, value, why) "
        f"{_values(refused)}; filled in: {_values(operation.locator('tr[data-param-name] input'))}"
    )

    expected_path = "/v1" + path.format(**ids)
    sent = reader.sent[already_sent:]
    matching = [r for r in sent if r.method == method and urlsplit(r.url).path == expected_path]
    assert len(matching) == 1, (
        f"the page was to send one {method} {expected_path}; it sent "
        f"{[f'{r.method} {r.url}' for r in sent]}"
    )
    [request] = matching
    body = answer.locator(".response-col_description .highlight-code pre")
    return Execution(
        request, status.inner_text().strip(), body.inner_text() if body.count() else None
    )


def test_list_operations_tried_are_the_contracts(reader):
    """A list added to the contract must be tried too (with an id seeded for its path)."""
    assert sorted(list_operations(reader.contract)) == sorted(LIST_PATHS)


@pytest.mark.parametrize("path", LIST_PATHS, ids=[f"GET {path}" for path in LIST_PATHS])
def test_a_reader_lists_with_the_values_swagger_ui_fills_in(reader, path):
    """Every list answers its pre-filled "Try it out" with the whole of what there is: examples
    of filters, `sort`, `fields`, `page` or conditional headers are sent as they are, and one
    that names another resource's field (refused by Swagger UI or answered 400), matches nothing
    or strips the items would leave a reader with an error or an empty or cut-down page."""
    if "{" in path:
        assert path in reader.path_ids, f"no seeded id for the path parameters of {path}"
    execution = run_as_prefilled(reader, "GET", path)
    problems = execution.problems()
    if execution.shown_status == "200":
        everything = reader.api.get(path.format(**reader.path_ids.get(path, {})))
        assert everything.status_code == 200, everything.text
        if "data" not in everything.json():  # not a list (the VAPID key): shown as it is
            assert json.loads(execution.shown_body or "{}") == everything.json()
            return
        assert everything.json()["data"], f"the seed left {path} empty"
        shown = json.loads(execution.shown_body or "{}").get("data")
        if not shown:
            problems.append("the page shows no items, though there are some")
        elif missing := set().union(*everything.json()["data"]) - set().union(*shown):
            problems.append(f"the items shown lack {sorted(missing)}")
    assert not problems, "; ".join(problems) + "\n" + execution.report()


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
def test_a_reader_changes_a_product_with_the_values_swagger_ui_fills_in(reader, method):
    """Replacing or changing an existing product works with only its id typed in: the example
    body is a valid product, and no example If-Match (which never matches, so 412) is sent."""
    execution = run_as_prefilled(reader, method, "/products/{id}")
    assert not execution.problems(), "; ".join(execution.problems()) + "\n" + execution.report()
