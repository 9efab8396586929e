"""What the handlers know of their app's configuration: its typed settings and what create_app
built from them, kept on the Flask app as one typed entry (Connexion calls a handler with the
spec's parameters only)."""

import dataclasses
from collections.abc import Callable

import flask

from shopapi.auth.tokens import AccessTokens
from shopapi.settings import Settings

_EXTENSION = "shopapi.configured"


@dataclasses.dataclass(frozen=True)
class Configured:
    settings: Settings
    # Signs and checks our tokens (the token endpoint, the JWKS document).
    tokens: AccessTokens
    # Why a Web Push endpoint may not be registered (the WEBPUSH_* settings), or None.
    webpush_endpoint_refusal: Callable[[str], str | None]
    # The VAPID key's public half that browsers subscribe with; None: no Web Push.
    vapid_public_key: str | None

    def install(self, app: flask.Flask) -> None:
        app.extensions[_EXTENSION] = self


def configured() -> Configured:
    """The configuration of the app serving the current request."""
    return flask.current_app.extensions[_EXTENSION]
