"""RFC 8615 well-known resources."""

import flask


def get_jwks():
    tokens = flask.current_app.extensions["shopapi.auth.tokens"]
    return tokens.jwks(), 200, {"Cache-Control": "public, max-age=3600"}
