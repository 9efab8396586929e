"""Which methods each path of the contract allows, for the `Allow` header of a 405 (Connexion's
405 names only one route's). Why: docs/contract.md."""

from shopapi.contract.operations import HTTP_METHODS, route_pattern


class AllowedMethods:
    def __init__(self, specs: list[dict]):
        self._paths = []
        for spec in specs:
            base = spec.get("servers", [{}])[0].get("url", "").rstrip("/")
            for template, item in spec["paths"].items():
                pattern = route_pattern(base + template)
                methods = {m.upper() for m in item if m in HTTP_METHODS}
                if "GET" in methods:
                    methods.add("HEAD")
                self._paths.append((template.count("{"), pattern, ", ".join(sorted(methods))))
        # A literal segment before a parameter, as the router takes it: /products/batch is not
        # /products/{id}.
        self._paths.sort(key=lambda entry: entry[0])

    def header_for(self, path: str) -> str | None:
        for _, pattern, allow in self._paths:
            if pattern.fullmatch(path):
                return allow
        return None
