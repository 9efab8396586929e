"""The docs UI (/v1/ui/, ...): Swagger UI from swagger-ui-bundle, offline, with the options a
reader needs, our own page (index.j2) and its script and style (static/), and the headers that
keep the page from being framed or running any script but these. Design: docs/contract.md (The
docs UI)."""

import pathlib

from starlette.staticfiles import StaticFiles

from shopapi.internals.connexion import TemplatedSwaggerUIAPI

HERE = pathlib.Path(__file__).parent

# Swagger UI's own options ("Configuration" in its docs), served as /vN/ui/swagger-ui-config.json.
CONFIG = {
    # A reload keeps the reader's access token (in the browser's localStorage), and only that:
    # the page's StoredAccessTokensOnly plugin (static/docs-ui.js) writes over the password,
    # refresh token and API key Swagger UI would keep with it.
    "persistAuthorization": True,
    # A box that narrows the operations to the tags matching what is typed.
    "filter": True,
    # Tags open, operations closed: the page is a table of contents, each operation one click
    # away ("none" would close the tags too, a second click for every operation).
    "docExpansion": "list",
    # The schemas at the bottom closed: each operation shows its own.
    "defaultModelsExpandDepth": 0,
    # "Try it out" only when asked for: a reader reads an operation before running it.
    "tryItOutEnabled": False,
}

# On every response of the docs UI. Scripts and styles only from the app (Swagger UI sets its
# styles through the DOM, which style-src does not govern); images also as data: URLs (Swagger
# UI's icons); "Try it out" and the contract from the app; never in a frame (clickjacking).
HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
        b"frame-ancestors 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]


class DocsUIAPI(TemplatedSwaggerUIAPI):
    """Connexion's docs UI with our page and its files (`/vN/ui/shopapi/...`): Swagger UI's
    assets are still the bundle's."""

    directory = str(HERE)

    def add_swagger_ui(self) -> None:
        # Before the bundle's files, which Connexion mounts at the same path.
        ui_path = self.options.swagger_ui_path.strip().rstrip("/")
        self.router.mount(ui_path + "/shopapi", app=StaticFiles(directory=HERE / "static"))
        super().add_swagger_ui()
