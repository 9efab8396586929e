"""Array query parameters in both forms clients send: the contract's comma list and repeated keys
(Connexion keeps only the last). Why: docs/contract.md."""

from shopapi.contract.per_definition import PerDefinition
from shopapi.internals.connexion import QUERY_STRING_DELIMITERS, HookedURIParser, OpenAPIURIParser


def _by_name(param_defns: list[dict]) -> tuple[dict, dict]:
    defns = {p["name"]: p for p in param_defns if p["in"] in OpenAPIURIParser.parsable_parameters}
    return defns, {name: defn.get("schema", {}) for name, defn in defns.items()}


class ArrayFormsURIParser(HookedURIParser):
    # Connexion makes several parsers per request, and its parser rebuilds both maps over all of
    # an operation's parameters (a list declares about eighty) on every look-up.
    parameter_maps = PerDefinition(_by_name)

    @staticmethod
    def join_repeated(values, param_defn, location):
        style = param_defn.get("style", OpenAPIURIParser.style_defaults[location])
        return QUERY_STRING_DELIMITERS.get(style, ",").join(values)
