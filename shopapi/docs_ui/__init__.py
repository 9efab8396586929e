"""The docs UI (/v1/ui/, ...): Swagger UI from swagger-ui-bundle, offline, with the options a
reader needs and our own page (index.j2), whose plugin folds the list language's operator
filters away. Design: docs/contract.md (The docs UI)."""

import pathlib

from shopapi.internals.connexion import TemplatedSwaggerUIAPI

# Swagger UI's own options ("Configuration" in its docs), served as /vN/ui/swagger-ui-config.json.
CONFIG = {
    # A reload keeps the reader's token or API key (in the browser's localStorage).
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


class DocsUIAPI(TemplatedSwaggerUIAPI):
    """Connexion's docs UI with our page: Swagger UI's assets are still the bundle's."""

    directory = str(pathlib.Path(__file__).parent)
