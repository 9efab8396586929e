"""Lists: filters, sort, offset and cursor pages, field selection, turned into Peewee expressions;
the `{"data", "meta", "links"}` envelope and its `Link` header. How: docs/web.md."""

import dataclasses
import datetime
import functools
import importlib.metadata
import math
import operator
from urllib.parse import urlencode

import flask
import peewee

from models import money, table_versions
from models.db import database
from shopapi.auth.security import current_principal
from shopapi.internals import connexion as connexion_internals
from shopapi.internals import peewee as peewee_internals
from shopapi.web import counts, cursors, etags, remembered_lists, representations
from shopapi.web.configured import configured
from shopapi.web.problems import ValidationProblem

DEFAULT_PER_PAGE = 20
_NOT_FILTERS = {"page", "per_page", "sort", "fields", "cursor"}
_OPERATORS = {"ne", "lt", "lte", "gt", "gte", "in", "contains"}


def _bad(parameter: str, detail: str) -> ValidationProblem:
    return ValidationProblem([{"parameter": parameter, "detail": detail}])


@dataclasses.dataclass(frozen=True)
class Amount:
    """A money amount as v2 filters and sorts it: computed from the minor units and the
    currency (models/money.py), selected under `alias` when a cursor needs its value."""

    expression: peewee.Node
    alias: str
    null = False


@functools.cache  # bounded: one entry per model
def columns_of(model: type[peewee.Model]) -> dict:
    """What a list of `model` can be filtered and sorted by, by the name the contract gives it:
    the columns, and for each money field of the model (`money_fields`) the v2 names
    `price.amount` and `price.currency`. A version's contract offers only its own names."""
    columns = dict(model._meta.columns)
    for name, (minor, currency) in getattr(model, "money_fields", {}).items():
        columns[f"{name}.amount"] = Amount(money.comparable(minor, currency), f"{name}_amount")
        columns[f"{name}.currency"] = currency
    return columns


def _node(column):
    return column.expression if isinstance(column, Amount) else column


def _typed(parameter: str, field, value):
    """Connexion typed numbers and booleans; times and amounts are left as text."""
    if value is None:
        return value
    if isinstance(value, list):
        return [_typed(parameter, field, item) for item in value]
    if isinstance(field, Amount):
        return money.comparable_value(value)
    if not isinstance(field, peewee.DateTimeField):
        return value
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise _bad(parameter, f"{value!r} is not an RFC 3339 date-time") from None
    if moment.tzinfo is None:
        raise _bad(parameter, f"{value!r} has no UTC offset (add Z or +00:00)")
    try:
        return moment.astimezone(datetime.UTC)
    except OverflowError:
        # Within hours of year 1 or 9999 with an offset: no UTC time. The contract's date-time
        # format refuses it before this; the same answer here.
        raise _bad(parameter, f"{value!r} is out of range (years 1 to 9999 in UTC)") from None


@functools.cache  # bounded: one entry per model
def _argument_names(model: type[peewee.Model]) -> dict[str, str]:
    """Each column's name as Connexion hands it to a handler, and the name itself."""
    return {connexion_internals.sanitized(name): name for name in columns_of(model)}


def _filter_of(model: type[peewee.Model], argument: str) -> tuple[str, str, str]:
    """(column name, operator, parameter name) for a handler argument. Connexion hands
    `price_cents[gte]` to the handler as `price_cents_gte` and `price.amount[gte]` as
    `priceamount_gte` (only identifier characters are kept)."""
    names = _argument_names(model)
    if argument in names:
        return names[argument], "eq", names[argument]
    name, op = argument.rsplit("_", 1)
    if op not in _OPERATORS or name not in names:
        raise LookupError(f"{argument} is not a filter")  # the contract let through a new name
    return names[name], op, f"{names[name]}[{op}]"


def _condition(field: peewee.Node, op: str, value):
    if op == "eq":
        return field.is_null() if value is None else field == value
    if op == "ne":
        # A missing value is "not" any given value.
        return field.is_null(False) if value is None else (field != value) | field.is_null()
    if op == "in":
        return field.in_(value)
    if op == "contains":
        # ASCII-case-insensitive on both databases: SQLite's LIKE folds ASCII only, and
        # PostgreSQL's ILIKE under the columns' "C" collation does the same.
        return field.contains(value)
    compare = {"lt": operator.lt, "lte": operator.le, "gt": operator.gt, "gte": operator.ge}
    return compare[op](field, value)


def _order(field: peewee.Field, descending: bool):
    # Missing values sort as the greatest: last ascending, first descending, on both databases.
    return field.desc(nulls="FIRST") if descending else field.asc(nulls="LAST")


def _equal(field: peewee.Field, value):
    return field.is_null() if value is None else field == value


def _beyond(field: peewee.Field, descending: bool, value):
    """Rows that sort strictly after `value` on this key, or None when none can."""
    if descending:
        return field.is_null(False) if value is None else field < value
    if value is None:
        return None
    # Missing values sort last ascending; a NOT NULL column has none, and leaving the IS NULL
    # out keeps the condition usable as an index bound.
    return (field > value) | field.is_null() if _nullable(field) else field > value


def _nullable(field: peewee.Node) -> bool:
    return getattr(field, "null", False)


def keyset_after(keys, position):
    """Keyset condition: rows that sort after `position` on (keys...): no duplicates or gaps
    while rows are inserted, ties and missing values included."""
    clauses = []
    for index, (field, descending) in enumerate(keys):
        beyond = _beyond(field, descending, position[index])
        if beyond is not None:
            ties = [_equal(f, v) for (f, _), v in zip(keys[:index], position, strict=False)]
            clauses.append(functools.reduce(operator.and_, [*ties, beyond]))
    condition = functools.reduce(operator.or_, clauses)
    first, descending = keys[0]
    if position[0] is not None and not _nullable(first):
        # Redundant, but a plain range on the leading key is what lets the database start the
        # index scan at the cursor instead of filtering every row before it.
        condition = (first <= position[0] if descending else first >= position[0]) & condition
    return condition


class ListRequest:
    """One list request: its filters, sort keys, and page or cursor. (Its `fields` are selected
    from the answer as its version shows it: shopapi/contract/resolver.py.)"""

    def __init__(self, model: type[peewee.Model], params: dict):
        columns = columns_of(model)
        self.filters = {k: v for k, v in params.items() if k not in _NOT_FILTERS}
        self.conditions = []
        for argument, value in sorted(self.filters.items()):
            name, op, parameter = _filter_of(model, argument)
            value = _typed(parameter, columns[name], value)
            self.conditions.append(_condition(_node(columns[name]), op, value))
        self.sort = params.get("sort") or "id"
        # The sort keys as (column, descending); `keys` has their SQL nodes.
        self.sorted_by = []
        for key in self.sort.split(","):
            column = columns[key.lstrip("-")]
            if all(column is not c for c, _ in self.sorted_by):
                self.sorted_by.append((column, key.startswith("-")))
        if all(column is not model.id for column, _ in self.sorted_by):
            self.sorted_by.append((model.id, False))
        self.keys = [(_node(column), descending) for column, descending in self.sorted_by]
        # Computed sort keys are selected too, for the cursor to read them from the last row.
        self.computed = [
            c.expression.alias(c.alias) for c, _ in self.sorted_by if isinstance(c, Amount)
        ]
        self.page = params.get("page")
        self.per_page = params.get("per_page") or DEFAULT_PER_PAGE
        self.cursor = params.get("cursor")
        if self.page is not None and self.cursor is not None:
            raise _bad("cursor", "cannot be combined with page: a cursor already says where")

    @functools.cached_property
    def binding(self) -> str:
        """What a cursor of this list is valid for: its path, filters and sort."""
        filters = sorted((k, str(v)) for k, v in self.filters.items())
        return cursors.binding_of(flask.request.path, filters, self.sort)

    def position_of(self, row) -> list:
        return [
            getattr(row, column.alias if isinstance(column, Amount) else column.column_name)
            for column, _ in self.sorted_by
        ]

    def read_position(self, token: str, secret: bytes) -> list:
        try:
            position = cursors.read(token, self.binding, secret)
        except cursors.CursorError as error:
            raise _bad("cursor", str(error)) from None
        return [
            datetime.datetime.fromisoformat(v)
            if v is not None and isinstance(f, peewee.DateTimeField)
            else v
            for (f, _), v in zip(self.sorted_by, position, strict=True)
        ]


def _link(**changes) -> str:
    # Relative references (RFC 3986 §4.2) stay right behind any proxy or gateway prefix.
    query = flask.request.args.to_dict(flat=False)
    for name, value in changes.items():
        if value is None:
            query.pop(name, None)
        else:
            query[name] = [str(value)]
    return f"{flask.request.path}?{urlencode(query, doseq=True)}"


@functools.cache
def _release() -> str:
    # A new release may represent the same rows otherwise.
    return importlib.metadata.version("shopapi")


def _unchanged_since(
    statement: tuple, own_fetch: bool, reads, asked_count, owners: tuple[int, ...] | None
) -> tuple[frozenset, str | None, str]:
    """The tables the page reads, their versions (None when a write to one would not move them)
    and the page's weak ETag, which those versions, the page's query (`statement`, its SQL and
    parameters), the request and the caller's visibility decide before anything else is read."""
    sql, params = statement
    tables = table_versions.tables_read_by(sql) | {m._meta.table_name for m in reads}
    if (own_fetch and not reads) or not table_versions.versioned(tables):
        return tables, None, None  # what the page reads is not all known: its body is hashed
    if owners is not None:
        tables = table_versions.owned_by(tables, owners)
    versions = table_versions.versions_of(tables)
    principal = current_principal()
    visibility = [principal.user_id, sorted(principal.scopes)]
    request = [flask.request.full_path, representations.current_version(), asked_count, _release()]
    return tables, versions, etags.list_tag(versions, sql, params, visibility, request)


def _page(ordered, statement: tuple, fetch, load, limit: int, offset: int) -> list:
    """At most `limit` rows of `ordered` from `offset`, with what `load` loads into them. Unless
    `fetch` runs the query its own way, they run from `statement`, `ordered`'s SQL as rendered
    for the tag and the count, with the page's LIMIT and OFFSET added, where Peewee would render
    the whole query again (an eighth of a list's instructions, docs/web.md)."""
    if fetch is not list:
        return load(fetch(ordered.limit(limit).offset(offset)))
    sql, params = statement
    page = f"{sql} LIMIT {database.param} OFFSET {database.param}"
    rows = peewee_internals.rows_of(ordered, database.execute_sql(page, [*params, limit, offset]))
    return load(rows)


def list_response(
    model,
    query,
    params: dict,
    represent,
    *,
    fetch=list,
    load=list,
    reads=(),
    owners: tuple[int, ...] | None = None,
):
    """The handler's answer for a list of `query` (rows of `model`) under the request's
    `params`, each row shown by `represent`. Related rows: `load` loads them into the page's
    rows (a list, which it returns), or `fetch`, where that needs the page's query (Peewee's
    prefetch), runs it and loads them. `reads` names the other models those and `represent`
    read, and those the handler read before (the parent whose list it is): every read of the
    request's is in the list's tag, which a revalidation is answered from
    (shopapi/pipeline/revalidation.py). `owners`: the users whose rows alone `query` reads, when
    it is narrowed to them (table_versions.NO_ONE for the rows of no one that it reads too):
    the tag then moves with those rows, not with everyone's."""
    request = ListRequest(model, params)
    secret = configured().settings.hmac_secret
    asked_count = counts.preferred(flask.request.headers.get("Prefer"))
    if request.conditions:
        query = query.where(*request.conditions)
    if request.computed:
        query = query.select_extend(*request.computed)
    ordered = query.order_by(*(_order(field, desc) for field, desc in request.keys))
    per_page = request.per_page
    statement = ordered.sql()  # rendered once: the ETag's and the count's
    own_fetch = fetch is not list or load is not list
    tables, versions, tag = _unchanged_since(statement, own_fetch, reads, asked_count, owners)
    if tag is not None:
        remembered_lists.note(tables, versions, tag)
        if etags.revalidated(tag):
            return None, 304, {"ETag": tag}

    if request.cursor is not None:
        position = request.read_position(request.cursor, secret)
        after = ordered.where(keyset_after(request.keys, position))
        rows = load(fetch(after.limit(per_page + 1)))
        more = len(rows) > per_page
        rows = rows[:per_page]
        meta = {"per_page": per_page}
        links = {"self": _link(), "first": _link(cursor=None)}
    else:
        page = request.page or 1
        how = asked_count or counts.by_default(representations.current_version())
        total, counted = counts.total(query, how, statement, tables, versions)
        total_pages = None if total is None else math.ceil(total / per_page)
        offset = (page - 1) * per_page
        if counted == "exact":
            rows = _page(ordered, statement, fetch, load, per_page, offset)
            more = page < total_pages
        else:
            # Not counted, or estimated: one row more than the page says whether another follows.
            rows = _page(ordered, statement, fetch, load, per_page + 1, offset)
            more = len(rows) > per_page
            rows = rows[:per_page]
        meta = {"page": page, "per_page": per_page}
        links = {"self": _link(page=page), "first": _link(page=1)}
        if page > 1:
            # Past the end of an exactly counted list, `prev` is its last page.
            exact = counted == "exact"
            links["prev"] = _link(page=min(page - 1, max(total_pages, 1)) if exact else page - 1)
        if more:
            links["next"] = _link(page=page + 1)
        if total is not None:
            meta |= {"total": total, "total_pages": total_pages}
            links["last"] = _link(page=max(total_pages, 1))

    next_cursor = None
    if more and rows:
        position = [
            value.isoformat() if isinstance(value, datetime.datetime) else value
            for value in request.position_of(rows[-1])
        ]
        next_cursor = cursors.issue(position, request.binding, secret)
        if request.cursor is not None:
            links["next"] = _link(cursor=next_cursor)
    meta["next_cursor"] = next_cursor

    body = {"data": [represent(row) for row in rows], "meta": meta, "links": links}
    headers = {
        "Link": ", ".join(f'<{url}>; rel="{rel}"' for rel, url in links.items() if rel != "self")
    }
    if asked_count is not None and request.cursor is None:
        headers["Preference-Applied"] = f"count={counted}"
    if tag is not None:
        headers["ETag"] = tag
    return body, 200, headers
