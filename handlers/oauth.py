"""The OAuth 2.0 token endpoint (RFC 6749); the protocol is in shopapi/auth/oauth.py."""

import flask

from shopapi.auth.oauth import TokenEndpoint


def issue_token(body):
    app = flask.current_app
    endpoint = TokenEndpoint(app.extensions["shopapi.auth.tokens"], app.config["REFRESH_TOKEN_TTL"])
    return endpoint.answer(body, flask.request.headers.get("Authorization", ""))
