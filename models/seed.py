"""Demo data for `make run`: a few users, products and orders. Does nothing when users exist.

Run with `python -m models.seed` (uses DATABASE_URL).
"""

from models import Order, Product, User
from models.db import database, open_database, use

USERS = [
    {"email": "admin@example.com", "name": "Ada Admin", "role": "admin", "password": "admin-pass"},
    {"email": "carol@example.com", "name": "Carol Customer", "password": "carol-pass"},
    {
        "email": "paul@example.com",
        "name": "Paul Partner",
        "role": "partner",
        "password": "paul-pass",
    },
]
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


def seed() -> bool:
    """Insert the demo data into an empty database; True when it did."""
    if User.select().exists():
        return False
    with database.atomic():
        users = [User.new(fields) for fields in USERS]
        products = [Product.new(fields) for fields in PRODUCTS]
        Order.place(users[1].id, [{"product_id": products[0].id, "quantity": 2}], "Gift wrap")
        placed = Order.place(users[1].id, [{"product_id": products[2].id, "quantity": 1}])
        placed.change({"status": "paid"})
    return True


if __name__ == "__main__":
    from shopapi.settings import Settings

    use(open_database(Settings.from_env().database_url))
    print("demo data seeded" if seed() else "demo data already present")
