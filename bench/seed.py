"""The load benchmark's data set in PostgreSQL: 100,000 products, 10,000 users and 200,000
orders (one to three items each), written with COPY in a few seconds. Idempotent: a database
that already holds the set is left as it is.

Every user's password is `bench-pass`, hashed once: 10,000 scrypt hashes would take minutes.

    BENCH_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/shopapi_bench python bench/seed.py
"""

import datetime
import io
import os
import pathlib
import random
import sys
import time

import peewee

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from models import Order, OrderItem, Product, User  # noqa: E402
from models.db import create_database_if_missing, open_database, use  # noqa: E402
from models.event import Event  # noqa: E402
from models.idempotency_key import IdempotencyKey  # noqa: E402
from models.migrations import migrate  # noqa: E402
from models.order import TRANSITIONS  # noqa: E402
from models.passwords import hash_password  # noqa: E402
from models.webhook import Delivery, DeliveryAttempt  # noqa: E402

URL = os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/shopapi_bench")
PRODUCTS, USERS, ORDERS = 100_000, 10_000, 200_000
PASSWORD = "bench-pass"  # noqa: S105 (the benchmark users' documented password)
CATEGORIES = ("books", "kitchen", "garden", "toys", None)


USER_COLUMNS = ("id", "created_at", "updated_at", "email", "name", "role", "password_hash")
PRODUCT_COLUMNS = (
    *("id", "created_at", "updated_at", "sku", "name", "price_cents", "currency"),
    *("stock", "category", "active"),
)
ORDER_COLUMNS = ("id", "created_at", "updated_at", "user_id", "status", "total_cents", "currency")
ITEM_COLUMNS = ("order_id", "product_id", "quantity", "unit_price_cents")


def _users(now: str):
    password_hash = hash_password(PASSWORD)
    for n in range(1, USERS + 1):
        yield n, now, now, f"user{n}@bench.example", f"User {n}", "customer", password_hash


def _products(now: str, prices: list[int], rng: random.Random):
    for n, price in enumerate(prices, start=1):
        stock, category = rng.randrange(1_000, 1_000_000), rng.choice(CATEGORIES)
        yield n, now, now, f"BENCH-{n:06d}", f"Product {n}", price, "EUR", stock, category, "t"


def _orders(now: str, prices: list[int], rng: random.Random) -> tuple[list, list]:
    """Orders of random users in every state, with one to three items each."""
    orders, items = [], []
    states = list(TRANSITIONS)
    for order_id in range(1, ORDERS + 1):
        lines = [
            (rng.randrange(1, PRODUCTS + 1), rng.randrange(1, 4))
            for _ in range(rng.randrange(1, 4))
        ]
        total = sum(prices[product - 1] * quantity for product, quantity in lines)
        user, status = rng.randrange(1, USERS + 1), rng.choice(states)
        orders.append((order_id, now, now, user, status, total, "EUR"))
        items += [(order_id, product, quantity, prices[product - 1]) for product, quantity in lines]
    return orders, items


def _copy(db: peewee.Database, model: type[peewee.Model], columns: tuple[str, ...], rows) -> None:
    """COPY `rows` (tuples in `columns`' order) into `model`'s table."""
    buffer = io.StringIO()
    for row in rows:
        buffer.write("\t".join(r"\N" if value is None else str(value) for value in row) + "\n")
    buffer.seek(0)
    names = ", ".join(f'"{column}"' for column in columns)
    cursor = db.cursor()
    cursor.copy_expert(f'COPY "{model._meta.table_name}" ({names}) FROM STDIN', buffer)


def _restart_ids(db: peewee.Database, model: type[peewee.Model]) -> None:
    table = model._meta.table_name
    db.execute_sql(
        f"SELECT setval(pg_get_serial_sequence(%s, 'id'), (SELECT max(id) FROM \"{table}\"))",
        (f'"{table}"',),
    )


def seed(url: str = URL) -> bool:
    """Fill the database `url` names with the benchmark's data set, unless it holds it; whether
    it had to."""
    create_database_if_missing(url)
    db = open_database(url)
    use(db)
    migrate(db)
    rng = random.Random(8)
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None).isoformat()
    with db.connection_context():
        if Order.select().count() >= ORDERS:
            return False
        with db.atomic():
            for model in (OrderItem, Order, User, Product):
                model.delete().execute()
            _copy(db, User, USER_COLUMNS, _users(now))
            prices = [rng.randrange(100, 100_000) for _ in range(PRODUCTS)]
            _copy(db, Product, PRODUCT_COLUMNS, _products(now, prices, rng))
            orders, items = _orders(now, prices, rng)
            _copy(db, Order, ORDER_COLUMNS, orders)
            _copy(db, OrderItem, ITEM_COLUMNS, items)
            for model in (User, Product, Order, OrderItem):
                _restart_ids(db, model)
    _vacuum(db)
    return True


def _vacuum(db: peewee.Database) -> None:
    """VACUUM ANALYZE, as autovacuum would in time: fresh statistics for the planner, and the
    visibility map that lets a COUNT(*) read only an index."""
    with db.connection_context():
        db.execute_sql("VACUUM ANALYZE")


def reset(url: str = URL) -> None:
    """Back to the seeded set: remove the orders and events a previous benchmark added, so that
    every run starts from the same data."""
    db = open_database(url)
    use(db)
    with db.connection_context(), db.atomic():
        OrderItem.delete().where(OrderItem.order_id > ORDERS).execute()
        Order.delete().where(Order.id > ORDERS).execute()
        for model in (DeliveryAttempt, Delivery, Event, IdempotencyKey):
            model.delete().execute()
    _vacuum(db)


if __name__ == "__main__":
    started = time.monotonic()
    seeded = seed()
    took = time.monotonic() - started
    print(f"{'seeded' if seeded else 'already seeded'} {URL} in {took:.1f} s")
