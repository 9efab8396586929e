"""Array query parameters in both forms clients send: the contract's comma list and repeated keys
(Connexion keeps only the last). Why: docs/contract.md."""

from connexion.uri_parsing import QUERY_STRING_DELIMITERS, OpenAPIURIParser


class ArrayFormsURIParser(OpenAPIURIParser):
    @staticmethod
    def _resolve_param_duplicates(values, param_defn, _in):
        style = param_defn.get("style", OpenAPIURIParser.style_defaults[_in])
        return QUERY_STRING_DELIMITERS.get(style, ",").join(values)
