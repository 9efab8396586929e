"""Demo data for `make run`: the demo accounts (models/demo.py), a few products and orders.

Run with `python -m models.seed` (`make seed`, part of `make run`). It seeds only the demo
database (DATABASE_URL unset), or any database with SEED_DEMO=1 (`make seed-demo`); SEED_DEMO=0
never. The demo admin is left out when the operator names their own (ADMIN_EMAIL), which the app
creates at start-up. Does nothing when users exist.
"""

import os
from collections.abc import Mapping

from models import Order, Product, User, demo
from models.bounds import Bounds
from models.db import database, open_database, use
from shopapi.settings import Settings
from shopapi.settings.parse import boolean  # the one reading of a boolean variable

PRODUCTS = [
    {
        "sku": "MUG-001",
        "name": "Coffee mug",
        "price_cents": 1250,
        "stock": 40,
        "category": "kitchen",
        "description": "Stoneware, 330 ml.",
    },
    {
        "sku": "TEE-M-BLK",
        "name": "T-shirt, black, M",
        "price_cents": 1999,
        "stock": 25,
        "category": "clothing",
    },
    {
        "sku": "BOOK-REST",
        "name": "RESTful Web APIs",
        "price_cents": 3490,
        "stock": 8,
        "category": "books",
    },
    {
        "sku": "STICKER-7",
        "name": "Sticker pack",
        "price_cents": 300,
        "stock": 500,
        "category": None,
        "description": None,
    },
]


def seed(with_admin: bool = True) -> bool:
    """Insert the demo data into a database without users, the demo admin only `with_admin`;
    True when it did."""
    if User.select().exists():
        return False
    with database.atomic():
        if with_admin:
            User.new(demo.ADMIN)
        carol = User.new(demo.CUSTOMER)
        User.new(demo.PARTNER)
        products = [Product.new(fields) for fields in PRODUCTS]
        Order.place(carol.id, [{"product_id": products[0].id, "quantity": 2}], "Gift wrap")
        placed = Order.place(carol.id, [{"product_id": products[2].id, "quantity": 1}])
        placed.change({"status": "paid"})
    return True


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether the demo data belongs in the database the environment names: SEED_DEMO says so
    (1/0); unset, only the demo database (no DATABASE_URL) gets it."""
    if environ.get("SEED_DEMO", "").strip():
        return boolean("SEED_DEMO", environ["SEED_DEMO"])
    return "DATABASE_URL" not in environ


def main(environ: Mapping[str, str] = os.environ) -> str:
    """Seed the database the environment names, if it wants the demo data; what was done."""
    if not wanted(environ):
        return (
            "no demo data: DATABASE_URL names a database of your own (SEED_DEMO=1 adds the demo "
            "data and its accounts with published passwords)"
        )
    # Seeding signs nothing: the generated secrets are the server's to warn of.
    settings = Settings.from_env(environ, warn_of_generated_secrets=False)
    use(open_database(settings.database_url, bounds=Bounds.configured(settings)))
    if not seed(with_admin=settings.admin_email is None):
        return "demo data already present (or the database has users)"
    if settings.admin_email:
        return "demo data seeded, without the demo admin: yours is ADMIN_EMAIL"
    return "demo data seeded"


if __name__ == "__main__":
    print(main())
