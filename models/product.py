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
    # v3's: grams, as shipped; None when not known.
    weight_grams = peewee.IntegerField(null=True)

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
        "weight_grams",
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
        """The products of these SKUs, by SKU, locked as `get_for_update` locks one, in id
        order, as orders take stock: neither a batch nor an order deadlocks another."""
        query = cls.select().where(cls.sku.in_(skus)).order_by(cls.id)
        if is_postgresql() and database.in_transaction():
            query = query.for_update()
        return {product.sku: product for product in query}

    @classmethod
    def plan_batch(cls, items: list[dict]) -> "Batch":
        """What writing `items` changes, worked out against the stored products read without a
        lock (outside the batch's transaction, or before its first lock): `Batch.write` then
        only checks that they are unchanged."""
        ordered = sorted(items, key=lambda item: item["sku"])
        skus = [item["sku"] for item in ordered]
        batch = Batch(items=items, stamps=cls._stamps(skus, locked=False))
        batch.merge(ordered, {p.sku: p for p in cls.select().where(cls.sku.in_(skus))})
        return batch

    @classmethod
    def _stamps(cls, skus: list[str], locked: bool) -> list[tuple]:
        """(sku, updated_at) of the stored products of `skus` in SKU order, as the driver reads
        them (no conversion), locked when `locked` (PostgreSQL) in id order, as orders take
        stock, so that neither deadlocks the other: every write to a product moves its
        updated_at, so equal stamps are unchanged products."""
        marks = ", ".join([database.param] * len(skus))
        lock = " FOR UPDATE" if locked and is_postgresql() else ""
        sql = f'SELECT "sku", "updated_at" FROM "product" WHERE "sku" IN ({marks}) ORDER BY "id"'  # noqa: S608
        return sorted(tuple(row) for row in database.execute_sql(sql + lock, skus).fetchall())

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
    """A catalogue batch (`Product.plan_batch`): each item whose SKU is new created, each known
    one's writable fields replaced (as `replace`). `changes`: each in SKU order as (event type,
    product, its stock before, for an update); `products`: in the order of the items."""

    items: list[dict]
    stamps: list[tuple]
    changes: list[tuple[str, Product, int | None]] = dataclasses.field(default_factory=list)
    by_sku: dict[str, Product] = dataclasses.field(default_factory=dict)
    products: list[Product] = dataclasses.field(default_factory=list)

    def merge(self, ordered: list[dict], stored: dict[str, Product]) -> None:
        now = utc_now()
        self.changes, self.by_sku = [], {}
        for item in ordered:
            product = stored.get(item["sku"])
            if product is None:
                product = Product(created_at=now, updated_at=now)
                product.replace(item)
                self.changes.append(("product.created", product, None))
            else:
                stock_before = product.stock
                if product.replace(item):
                    product.updated_at = now
                    self.changes.append(("product.updated", product, stock_before))
            self.by_sku[item["sku"]] = product

    def write(self) -> None:
        """Lock the stored products (in id order) and write the batch, in the caller's
        transaction, a statement per kind of write: its locks are held for those statements
        alone. Products changed since the plan are merged again, under the lock. New rows are
        inserted in SKU order too, so two batches cannot deadlock each other."""
        ordered = sorted(self.items, key=lambda item: item["sku"])
        skus = [item["sku"] for item in ordered]
        if Product._stamps(skus, locked=True) != self.stamps:
            self.merge(ordered, Product.by_skus_for_update(skus))
        new = [p for kind, p, _ in self.changes if kind == "product.created"]
        if new:
            # Every column but the id the database gives (each has a value or its default).
            columns = [name for name in Product._meta.fields if name != "id"]
            insert_rows(
                Product, [{name: getattr(product, name) for name in columns} for product in new]
            )
            created = Product.select(Product.id, Product.sku).where(
                Product.sku.in_([p.sku for p in new])
            )
            ids = {row.sku: row.id for row in created}
            for product in new:
                product.id = ids[product.sku]
        updated = [p for kind, p, _ in self.changes if kind == "product.updated"]
        if updated:
            names = ("id", *(n for n in Product.writable if n in Product._meta.fields))
            update_rows(
                Product,
                [{n: getattr(p, n) for n in (*names, "updated_at")} for p in updated],
            )
        self.products = [self.by_sku[item["sku"]] for item in self.items]
