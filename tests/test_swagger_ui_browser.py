"""The Swagger UI at /v1/ui/ works for a person in a real browser (headless Chromium): they can
authorise with the password flow or an API key, as the page's description tells them to, and
"Try it out" reaches the live API, with the answer shown in the page."""

import json
import os
import shutil

import httpx
import pytest
from live import live_server

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # reported by the `browser` fixture, which knows whether this is CI
    sync_playwright = None

pytestmark = pytest.mark.slow

ADMIN = {"ADMIN_EMAIL": "ui-admin@example.com", "ADMIN_PASSWORD": "ui-admin-pass"}
TIMEOUT_MS = 15_000


def _unavailable(reason: str):
    # CI installs Chromium and playwright, so a missing one there is a broken job, not a skip.
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run the browser tests", pytrace=False)
    pytest.skip(reason)


def _chromium() -> str | None:
    for path in ("/usr/bin/chromium", shutil.which("chromium")):
        if path and os.path.exists(path):
            return path
    return None


@pytest.fixture(scope="module")
def browser():
    if sync_playwright is None:
        _unavailable("the playwright package is not installed")
    executable = _chromium()
    if executable is None:
        _unavailable("Chromium is not installed (/usr/bin/chromium or chromium on PATH)")
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
    yield page
    context.close()


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


def open_authorize_dialog(page, base: str):
    page.goto(f"{base}/v1/ui/")
    page.get_by_role("button", name="Authorize").click()
    dialog = page.locator(".modal-ux")
    expect(dialog.get_by_role("heading", name="Available authorizations")).to_be_visible()
    return dialog


def close_dialog(page, dialog):
    dialog.get_by_role("button", name="Close").first.click()
    expect(dialog).to_have_count(0)


def authorise_with_password(page, base: str):
    """Authorize under `oauth2 (password)` as a person would: email, password, every scope, and
    the rest of the form (client id, secret and where they go) left as Swagger UI offers it."""
    dialog = open_authorize_dialog(page, base)
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


def try_it_out(page, operation_id: str, body: dict | None = None):
    """Run an operation from its panel and return the live response's status cell."""
    operation = page.locator(f"#operations-products-{operation_id}")
    operation.locator(".opblock-summary").click()
    operation.get_by_role("button", name="Try it out").click()
    if body is not None:
        # The textarea holds the schema's example; replace it.
        operation.locator("textarea.body-param__text").fill(json.dumps(body))
    operation.get_by_role("button", name="Execute").click()
    return operation.locator(".live-responses-table tbody .response-col_status")


def test_a_person_authorises_with_a_password_and_creates_a_product(app, database_url, page):
    product = {"sku": "UI-TEST-1", "name": "From the browser", "price_cents": 1250, "stock": 3}
    with live_server(database_url, **ADMIN) as base:
        authorise_with_password(page, base)

        expect(try_it_out(page, "list_products")).to_have_text("200")
        expect(try_it_out(page, "create_product", product)).to_have_text("201")

        # The page saying 201 is not the product existing: ask the API itself. The tables were
        # emptied first, so it is the only product.
        listed = httpx.get(
            f"{base}/v1/products",
            headers={"Authorization": f"Bearer {admin_token(base)}"},
        )
        assert listed.status_code == 200, listed.text
        assert [{key: item[key] for key in product} for item in listed.json()["data"]] == [product]


def test_a_partner_authorises_with_an_api_key(app, database_url, page):
    with live_server(database_url, **ADMIN) as base:
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

        expect(try_it_out(page, "list_products")).to_have_text("200")
