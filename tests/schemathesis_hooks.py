"""Hooks for the contract fuzzing (named in schemathesis.toml)."""

import schemathesis

# A cursor is valid only as the API issued it (signed, bound to its filters and sort), so every
# generated one is a documented 400 that no schema can express — and so is one next to `page`.
# The generators drop it; tests/test_list_edges.py covers cursors.


@schemathesis.hook
def map_query(context, query):
    if query:
        query.pop("cursor", None)
    return query


@schemathesis.hook
def map_case(context, case):
    # The coverage phase builds cases without the query hooks.
    if case.query:
        case.query.pop("cursor", None)
    return case
