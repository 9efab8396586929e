"""Compact JSON with orjson, instead of Connexion's pretty-printing default. Why: docs/web.md."""

import json

import orjson
from connexion.jsonifier import Jsonifier

# Times as RFC 3339 UTC with a `Z`. Shared with shopapi.web.etags, which hashes a representation
# rendered the way a client receives it.
OPTIONS = orjson.OPT_UTC_Z | orjson.OPT_NAIVE_UTC


class CompactJsonifier(Jsonifier):
    def __init__(self):
        super().__init__(json)

    def dumps(self, data, **kwargs) -> bytes:
        return orjson.dumps(data, option=OPTIONS)

    def loads(self, data):
        return orjson.loads(data)
