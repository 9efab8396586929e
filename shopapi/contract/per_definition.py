"""Values derived from a piece of the spec (a schema, an operation's parameters), computed once:
Connexion builds its validators and URI parsers anew for every request, from the same objects."""

from collections.abc import Callable
from typing import Generic, TypeVar

Definition = TypeVar("Definition")
Derived = TypeVar("Derived")


class PerDefinition(Generic[Definition, Derived]):
    """`build(definition)`, once per definition object. The definitions are the app's own spec,
    alive as long as the app; each is kept here so that its id cannot be reused. Cleared when
    full: a process that builds many apps (the test suite) does not grow without bound."""

    def __init__(self, build: Callable[[Definition], Derived], limit: int = 4096):
        self._build = build
        self._limit = limit
        self._values: dict[int, tuple[Definition, Derived]] = {}

    def __call__(self, definition: Definition) -> Derived:
        cached = self._values.get(id(definition))
        if cached is None or cached[0] is not definition:
            if len(self._values) >= self._limit:
                self._values.clear()
            cached = self._values[id(definition)] = (definition, self._build(definition))
        return cached[1]
