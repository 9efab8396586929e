"""Array query parameters in both forms clients send: the contract's comma list
(`status[in]=paid,shipped`, `style: form, explode: false`) and the repeated key that generated
clients send for any array (`status[in]=paid&status[in]=shipped`).

Connexion keeps only the last of repeated keys of a non-exploded array, which answers for a
part of what the client asked; here every value counts.
"""

from connexion.uri_parsing import QUERY_STRING_DELIMITERS, OpenAPIURIParser


class ArrayFormsURIParser(OpenAPIURIParser):
    @staticmethod
    def _resolve_param_duplicates(values, param_defn, _in):
        style = param_defn.get("style", OpenAPIURIParser.style_defaults[_in])
        return QUERY_STRING_DELIMITERS.get(style, ",").join(values)
