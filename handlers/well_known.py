"""RFC 8615 well-known resources."""

from shopapi.web.configured import configured


def get_jwks():
    tokens = configured().tokens
    return tokens.jwks(), 200, {"Cache-Control": "public, max-age=3600"}
