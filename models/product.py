import dataclasses
from typing import ClassVar

import peewee

from models.base import BaseModel, insert_rows, update_rows
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

    @staticmethod
    def check_unique_skus(skus: list[str]) -> None:
        """InvalidReference at the second place of a SKU that `skus` holds twice."""
        first = {}
        for index, sku in enumerate(skus):
            if sku in first:
                raise InvalidReference(
                    f"/products/{index}/sku", f"{sku!r} is also /products/{first[sku]}'s."
                )
            first[sku] = index

    @classmethod
    def by_skus_for_update(cls, skus: list[str]) -> dict[str, "Product"]:
        """The products of these SKUs, by SKU, locked as `get_for_update` locks one, in SKU
        order: with the rows a batch creates also inserted in SKU order (`upsert_by_sku`), two
        batches cannot deadlock each other."""
        query = cls.select().where(cls.sku.in_(skus)).order_by(cls.sku)
        if is_postgresql() and database.in_transaction():
            query = query.for_update()
        return {product.sku: product for product in query}

    @classmethod
    def upsert_by_sku(cls, items: list[dict]) -> "Batch":
        """Create each item whose SKU is new, and replace the writable fields of each known one
        (as `replace`), in the caller's transaction, with a statement per kind of write rather
        than one per product: the batch's locks are held for milliseconds, not seconds. Rows are
        locked and inserted in SKU order (see `by_skus_for_update`)."""
        ordered = sorted(items, key=lambda item: item["sku"])
        stored = cls.by_skus_for_update([item["sku"] for item in ordered])
        now = utc_now()
        batch = Batch()
        new = []
        for item in ordered:
            product = stored.get(item["sku"])
            if product is None:
                product = cls(created_at=now, updated_at=now)
                product.replace(item)
                new.append(product)
                batch.changes.append(("product.created", product, None))
            else:
                stock_before = product.stock
                if product.replace(item):
                    product.updated_at = now
                    batch.changes.append(("product.updated", product, stock_before))
            batch.by_sku[item["sku"]] = product
        if new:
            insert_rows(cls, [{**product.__data__} for product in new])
            created = cls.select(cls.id, cls.sku).where(cls.sku.in_([p.sku for p in new]))
            ids = {row.sku: row.id for row in created}
            for product in new:
                product.id = ids[product.sku]
        updated = [product for kind, product, _ in batch.changes if kind == "product.updated"]
        if updated:
            names = ("id", *(n for n in cls.writable if n in cls._meta.fields), "updated_at")
            update_rows(
                cls, [{name: product.__data__[name] for name in names} for product in updated]
            )
        batch.products = [batch.by_sku[item["sku"]] for item in items]
        return batch

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


@dataclasses.dataclass
class Batch:
    """What `Product.upsert_by_sku` did: the products in the order of the items, and each
    change in SKU order as (event type, product, its stock before, for an update)."""

    products: list[Product] = dataclasses.field(default_factory=list)
    changes: list[tuple[str, Product, int | None]] = dataclasses.field(default_factory=list)
    by_sku: dict[str, Product] = dataclasses.field(default_factory=dict)
