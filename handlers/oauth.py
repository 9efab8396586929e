"""The OAuth 2.0 token endpoint (RFC 6749); the protocol is in shopapi/auth/oauth.py."""

import flask

from shopapi.auth.oauth import TokenEndpoint
from shopapi.web.configured import configured


def issue_token(body):
    app = configured()
    endpoint = TokenEndpoint(app.tokens, app.settings.refresh_token_ttl)
    return endpoint.answer(body, flask.request.headers.get("Authorization", ""))
