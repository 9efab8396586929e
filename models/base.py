"""The base model: bound to the app's database, with creation and change times."""

import peewee

from models.db import database, is_postgresql
from models.fields import UTCDateTimeField, utc_now
from shopapi.internals import peewee as peewee_internals

# Queries run often, and their SQL, by what shapes them (the model, the kind of database, ...):
# rendered once, where Peewee would render them for every call (its rendering of a model's
# SELECT costs more than running it: docs/database.md). `get_by_id`'s and `get_for_update`'s,
# one a model; `where_in`'s, one a field and number of values up to this many (a page's
# largest).
_RENDERED: dict[tuple, tuple[peewee.ModelSelect, str]] = {}
RENDERED_ONCE_UP_TO = 100


def _rows_rendered_once(shape: tuple, build, params: list) -> list:
    """The rows of the query `build()` makes, run with `params`: built and rendered the first
    time a query of this `shape` runs, its SQL run as it is after that."""
    if shape not in _RENDERED:
        query = build()
        _RENDERED[shape] = query, query.sql()[0]
    query, sql = _RENDERED[shape]
    return peewee_internals.rows_of(query, database.execute_sql(sql, params))


class Written(dict):
    """Fields a client wrote, by name, and `writable`: the names of every field its version of
    the contract lets it write. A replacement (`BaseModel.replace`) resets the writable ones it
    leaves out and no other, so that a field only a later version has is never reset by a
    client that cannot see it."""

    def __init__(self, fields: dict, writable: frozenset[str]):
        super().__init__(fields)
        self.writable = writable

    def keeping(self, *names: str) -> "Written":
        """These fields, with `names` kept as they are when left out (a user's role)."""
        return Written(self, self.writable - set(names))


class BaseModel(peewee.Model):
    created_at = UTCDateTimeField(default=utc_now)
    updated_at = UTCDateTimeField(default=utc_now)

    # The fields a client may set, in the order a representation lists them.
    writable: tuple[str, ...] = ()

    class Meta:
        database = database
        legacy_table_names = False

    def save(self, *args, **kwargs):
        if self.get_id() is not None:
            self.updated_at = utc_now()
        return super().save(*args, **kwargs)

    @classmethod
    def new(cls, fields: dict):
        """Insert a row from writable `fields`; omitted ones take their defaults."""
        row = cls()
        row.replace(fields)
        row.save()
        return row

    @classmethod
    def get_by_id(cls, pk):
        """The row with this primary key, or `cls.DoesNotExist`, as Peewee's `get_by_id`; its
        SQL rendered once for the model and the kind of database."""
        return cls._one(pk, locked=False)

    @classmethod
    def get_for_update(cls, id: int):
        """The row with this id, as `get_by_id`, locked against other writers until the current
        transaction ends: SELECT ... FOR UPDATE on PostgreSQL. On SQLite a transaction already
        holds the database's write lock (BEGIN IMMEDIATE, see models.db), and Peewee refuses
        FOR UPDATE there. Outside a transaction a lock would end with the statement, so none is
        taken and the read is the same as `get_by_id`'s."""
        return cls._one(id, locked=is_postgresql() and database.in_transaction())

    @classmethod
    def _one(cls, pk, locked: bool):
        def build():
            query = cls.select().where(cls._meta.primary_key == 0).limit(1)
            return query.for_update() if locked else query

        key = cls._meta.primary_key.db_value(pk)
        rows = _rows_rendered_once((cls, type(database.obj), locked), build, [key, 1])
        if not rows:
            raise cls.DoesNotExist(f"{cls.__name__} {pk!r} does not exist")
        return rows[0]

    def assign(self, changes: dict) -> bool:
        """Set the writable fields named in `changes` (a merge patch: absent fields stay).
        Returns whether any value changed."""
        changed = False
        for name in self.writable:
            if name in changes:
                changed |= self._set(name, changes[name])
        return changed

    def replace(self, fields: dict) -> bool:
        """Set every writable field: from `fields`, else the field's default (a PUT). Fields a
        client wrote (`Written`) reset only what its version may write. A writable attribute
        that is not a column (a user's password) is only ever set, never reset. Returns whether
        any value changed."""
        resettable = fields.writable if isinstance(fields, Written) else self.writable
        changed = False
        for name in self.writable:
            if name in fields:
                changed |= self._set(name, fields[name])
            elif name in resettable and name in self._meta.fields:
                field = self._meta.fields[name]
                changed |= self._set(
                    name, field.default() if callable(field.default) else field.default
                )
        return changed

    def fields_by_name(self) -> dict:
        """Every field of the row by name: a representation that each API version's contract
        narrows to the fields it has (a column added for one version is shown by it alone)."""
        return {name: getattr(self, name) for name in self._meta.sorted_field_names}

    def _set(self, name: str, value) -> bool:
        """Set `name` to `value`; whether that changed what it reads as (a write-only attribute,
        which cannot be read, always does)."""
        try:
            before = getattr(self, name)
        except AttributeError:
            setattr(self, name, value)
            return True
        setattr(self, name, value)
        return getattr(self, name) != before


def where_in(field: peewee.Field, values: list) -> list:
    """The rows of `field`'s model whose `field` is one of `values`, in primary key order:
    Peewee's own rows, their SQL rendered once for the field, the number of values and the
    kind of database, as `get_by_id`'s."""
    if not values:
        return []
    model = field.model

    def build():
        return model.select().where(field.in_(values)).order_by(model._meta.primary_key)

    if len(values) > RENDERED_ONCE_UP_TO:
        return list(build())
    shape = (model, field.name, len(values), type(database.obj))
    return _rows_rendered_once(shape, build, [field.db_value(value) for value in values])


# Rows a statement of `insert_rows` or `update_rows` writes: a thousand rows of a dozen columns
# stay under SQLite's 32,766 parameters in two statements.
ROWS_PER_STATEMENT = 500


def _quoted(name: str) -> str:
    return f'"{name}"'


def _rows_sql(model, rows: list[dict]) -> tuple[list[peewee.Field], str, list]:
    """The fields `rows` name (each row names the same), a VALUES list of them, and its
    parameters, each value as its field stores it."""
    fields = [model._meta.fields[name] for name in rows[0]]
    row = f"({', '.join([database.param] * len(fields))})"
    params = [field.db_value(values[field.name]) for values in rows for field in fields]
    return fields, ", ".join([row] * len(rows)), params


def insert_rows(model, rows: list[dict]) -> None:
    """Insert `rows` (field names and values, the same names in each), ROWS_PER_STATEMENT to a
    statement, rendered here: Peewee's `insert_many` renders each value as a node, which cost a
    second for a thousand products."""
    for start in range(0, len(rows), ROWS_PER_STATEMENT):
        fields, values, params = _rows_sql(model, rows[start : start + ROWS_PER_STATEMENT])
        columns = ", ".join(_quoted(field.column_name) for field in fields)
        table = _quoted(model._meta.table_name)
        database.execute_sql(f"INSERT INTO {table} ({columns}) VALUES {values}", params)  # noqa: S608


def _changed_value(field: peewee.Field) -> str:
    """A field's new value in `update_rows`, cast on PostgreSQL to the column's type: there a
    VALUES column of NULLs alone is text, which an integer column does not take."""
    value = f'"changed".{_quoted(field.column_name)}'
    if not is_postgresql():
        return value
    context = database.get_sql_context()
    column_type, _ = context.sql(field.ddl_datatype(context)).query()
    return f"{value}::{column_type}"


def update_rows(model, rows: list[dict]) -> None:
    """Set each row's fields by its `id` (field names and values, the same names in each, `id`
    first), ROWS_PER_STATEMENT to a statement: one UPDATE from a VALUES list, which SQLite and
    PostgreSQL both take, where Peewee's `bulk_update` writes a CASE per field and row."""
    for start in range(0, len(rows), ROWS_PER_STATEMENT):
        fields, values, params = _rows_sql(model, rows[start : start + ROWS_PER_STATEMENT])
        names = ", ".join(_quoted(field.column_name) for field in fields)
        table = _quoted(model._meta.table_name)
        changes = ", ".join(
            f"{_quoted(field.column_name)} = {_changed_value(field)}" for field in fields[1:]
        )
        statement = (
            f'WITH "changed" ({names}) AS (VALUES {values}) '  # noqa: S608 (names are ours)
            f'UPDATE {table} SET {changes} FROM "changed" WHERE {table}."id" = "changed"."id"'
        )
        database.execute_sql(statement, params)
