from typing import ClassVar

import peewee

from models.base import BaseModel
from models.db import database, is_postgresql
from models.errors import Conflict, InvalidReference, OutOfStock
from models.fields import utc_now

# The largest stock a product holds: the contract's bound, and PostgreSQL's `integer`.
MAX_STOCK = 2**31 - 1


class Product(BaseModel):
    sku = peewee.CharField(max_length=32, unique=True)
    name = peewee.CharField(max_length=200)
    description = peewee.TextField(null=True)
    price_cents = peewee.BigIntegerField()
    currency = peewee.CharField(max_length=3, default="EUR")
    stock = peewee.IntegerField(default=0)
    category = peewee.CharField(max_length=100, null=True)
    active = peewee.BooleanField(default=True)

    # Money in minor units and its currency: v2 shows them together as `price`.
    money_fields: ClassVar = {"price": (price_cents, currency)}

    writable = (
        "sku",
        "name",
        "description",
        "price_cents",
        "currency",
        "stock",
        "category",
        "active",
    )

    @classmethod
    def by_skus_for_update(cls, skus: list[str]) -> dict[str, "Product"]:
        """The products of these SKUs, by SKU, locked as `get_for_update` locks one (in id
        order, as orders take stock, so that neither a batch nor an order deadlocks another).
        A SKU twice is an InvalidReference at its second place in `skus`."""
        first = {}
        for index, sku in enumerate(skus):
            if sku in first:
                raise InvalidReference(
                    f"/products/{index}/sku", f"{sku!r} is also /products/{first[sku]}'s."
                )
            first[sku] = index
        query = cls.select().where(cls.sku.in_(skus)).order_by(cls.id)
        if is_postgresql() and database.in_transaction():
            query = query.for_update()
        return {product.sku: product for product in query}

    def take_stock(self, quantity: int) -> None:
        """Decrement stock only if enough is left, in one statement: the row lock the UPDATE
        takes makes concurrent orders queue, so stock is never oversold. This row is then the
        row as taken (what the low-stock check and its event show): on PostgreSQL as the UPDATE
        returns it; on SQLite the transaction has held the write lock since the row was read."""
        cls, now = type(self), utc_now()
        taken = cls.update(stock=cls.stock - quantity, updated_at=now).where(
            (cls.id == self.id) & (cls.stock >= quantity)
        )
        if is_postgresql():
            returned = taken.returning(*cls._meta.sorted_fields).dicts().execute()
            written = next(iter(returned), None)
            for name, value in (written or {}).items():
                setattr(self, name, value)
        else:
            written = taken.execute()
            if written:
                self.stock, self.updated_at = self.stock - quantity, now
        if not written:
            raise OutOfStock(f"product {self.id} has fewer than {quantity} in stock")

    @classmethod
    def return_stock(cls, product_id: int, quantity: int) -> None:
        # Stock saturates at the column's maximum: a count set to the maximum while an order
        # held units cannot take them back without overflowing (a cancel must not fail on it).
        room = MAX_STOCK - quantity
        stock = peewee.Case(None, [(cls.stock > room, MAX_STOCK)], cls.stock + quantity)
        returned = cls.update(stock=stock, updated_at=utc_now())
        returned.where(cls.id == product_id).execute()

    def fell_below(self, threshold: int, stock_before: int) -> bool:
        """Did the change from `stock_before` take this product's stock below the low-stock
        `threshold`? (Once: stock that was already below does not fall again.)"""
        return self.stock < threshold <= stock_before

    def delete_unreferenced(self) -> None:
        # Orders keep their items' products: a product that was ever ordered stays (it can be
        # deactivated instead).
        if self.order_items.exists():
            raise Conflict(f"Product {self.id} is part of orders; set active to false instead.")
        self.delete_instance()
