"""Users, products, orders and their items."""

import peewee

from models.fields import UTCDateTimeField, utc_now


def up(db: peewee.Database) -> None:
    # Text sorts by code point on both databases: SQLite's default BINARY collation compares
    # UTF-8 bytes, and PostgreSQL's "C" collation does the same.
    collation = '"C"' if isinstance(db, peewee.PostgresqlDatabase) else None

    def text(max_length=None, **options):
        if max_length is None:
            return peewee.TextField(collation=collation, **options)
        return peewee.CharField(max_length=max_length, collation=collation, **options)

    class Base(peewee.Model):
        created_at = UTCDateTimeField(default=utc_now)
        updated_at = UTCDateTimeField(default=utc_now)

        class Meta:
            database = db
            legacy_table_names = False

    class User(Base):
        email = text(254, unique=True)
        name = text(200)
        role = text(16, default="customer")
        password_hash = peewee.CharField(max_length=200)

    class Product(Base):
        sku = text(32, unique=True)
        name = text(200)
        description = text(null=True)
        price_cents = peewee.BigIntegerField()
        currency = text(3, default="EUR")
        stock = peewee.IntegerField(default=0)
        category = text(100, null=True)
        active = peewee.BooleanField(default=True)

    class Order(Base):
        user = peewee.ForeignKeyField(User, on_delete="RESTRICT")
        status = text(16, default="pending")
        total_cents = peewee.BigIntegerField()
        currency = text(3)
        note = text(null=True)

    class OrderItem(peewee.Model):
        order = peewee.ForeignKeyField(Order, on_delete="CASCADE")
        product = peewee.ForeignKeyField(Product, on_delete="RESTRICT")
        quantity = peewee.IntegerField()
        unit_price_cents = peewee.BigIntegerField()

        class Meta:
            database = db
            legacy_table_names = False

    db.create_tables([User, Product, Order, OrderItem])
