"""Which methods each path of the contract allows, for the `Allow` header of a 405 (Connexion's
405 names only one route's). Why: docs/contract.md."""

from collections.abc import Iterable

from shopapi.contract.operations import Operation, route_pattern


class AllowedMethods:
    def __init__(self, operations: Iterable[Operation]):
        methods_of: dict[str, set[str]] = {}
        for operation in operations:
            methods_of.setdefault(operation.route, set()).add(operation.method)
        self._paths = []
        for route, methods in methods_of.items():
            if "GET" in methods:
                methods.add("HEAD")
            self._paths.append((route.count("{"), route_pattern(route), ", ".join(sorted(methods))))
        # A literal segment before a parameter, as the router takes it: /products/batch is not
        # /products/{id}.
        self._paths.sort(key=lambda entry: entry[0])

    def header_for(self, path: str) -> str | None:
        for _, pattern, allow in self._paths:
            if pattern.fullmatch(path):
                return allow
        return None
