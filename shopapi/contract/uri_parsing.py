"""Array query parameters in both forms clients send: the contract's comma list and repeated keys
(Connexion keeps only the last). Why: docs/contract.md."""

from connexion.uri_parsing import QUERY_STRING_DELIMITERS, OpenAPIURIParser

from shopapi.contract.per_definition import PerDefinition


def _by_name(param_defns: list[dict]) -> tuple[dict, dict]:
    defns = {p["name"]: p for p in param_defns if p["in"] in OpenAPIURIParser.parsable_parameters}
    return defns, {name: defn.get("schema", {}) for name, defn in defns.items()}


# Connexion makes several parsers per request, and its parser rebuilds both maps over all of an
# operation's parameters (a list declares about eighty) on every look-up.
_maps = PerDefinition(_by_name)


class ArrayFormsURIParser(OpenAPIURIParser):
    def __init__(self, param_defns, body_defn):
        self._param_defns, self._param_schemas = _maps(param_defns)
        self._body_schema = body_defn.get("schema", {})
        self._body_encoding = body_defn.get("encoding", {})

    @property
    def param_schemas(self):
        return self._param_schemas

    @staticmethod
    def _resolve_param_duplicates(values, param_defn, _in):
        style = param_defn.get("style", OpenAPIURIParser.style_defaults[_in])
        return QUERY_STRING_DELIMITERS.get(style, ",").join(values)
