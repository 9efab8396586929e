"""PostgreSQL vacuums the product table after a thousand changed rows, not a fifth of the table.

A list's exact `meta.total` is a COUNT(*) that PostgreSQL answers from the index alone only on
pages its visibility map marks all-visible; every update of a product (a price, the stock an
order takes) clears its page's mark until the next vacuum. By default autovacuum waits for
50 + 20 % of the rows to be dead: with 100,000 products and the bench's mix that is half an
hour, and within two minutes most pages had lost their mark, the count read the table too and
took several times as long (bench/results/soak.md). A vacuum of a table whose other pages are
all-visible reads only the changed ones. SQLite has no vacuum of this kind: nothing to change.
"""

import peewee

# Dead rows after which autovacuum visits the table: 500 + 0.5 % of its rows.
SETTINGS = "autovacuum_vacuum_threshold = 500, autovacuum_vacuum_scale_factor = 0.005"


def up(db: peewee.Database) -> None:
    if isinstance(db, peewee.PostgresqlDatabase):
        db.execute_sql(f'ALTER TABLE "product" SET ({SETTINGS})')
