"""An index on a product's price as an amount comparable across currencies, for v2's and v3's
sort by `price.amount`, as `(price_cents, id)` (m0002) serves v1's sort by `price_cents`.

The amount is computed in SQL (models/money.py's `comparable`). Without an index on it, a list
sorted by it computed the amount of every matching product and sorted them all for each page:
a page of 20 of 100,000 products cost 36 PostgreSQL CPU-ms, against 0.8 for v1's page sorted by
`price_cents` (bench/results/load.md). The index is built from the same expression the lists
sort by; tests/test_list_edges.py checks that the sort is served by an index. SQLite gets
none: it is the embedded default, whose data sets are small enough to sort.
"""

import peewee

from models.money import comparable

NAME = "product_price_amount_id"


def up(db: peewee.Database) -> None:
    if not isinstance(db, peewee.PostgresqlDatabase):
        return
    expression, params = (
        db.get_sql_context()
        .sql(comparable(peewee.SQL('"price_cents"'), peewee.SQL('"currency"')))
        .query()
    )
    # An index is defined by literal SQL: the currencies and factors are written into it.
    literal = db.cursor().mogrify(expression, params).decode()
    db.execute_sql(f'CREATE INDEX IF NOT EXISTS "{NAME}" ON "product" (({literal}), "id")')
