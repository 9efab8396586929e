import collections
from collections.abc import Callable
from typing import ClassVar

import peewee

from models.base import BaseModel, where_in
from models.db import database
from models.errors import Conflict, InvalidReference, TransitionNotAllowed
from models.fields import utc_now
from models.product import Product
from models.user import User

# Which states each state may move to. Leaving `pending` or `paid` for `cancelled` gives the
# stock back; every other change keeps it taken.
TRANSITIONS = {
    "pending": {"paid", "cancelled"},
    "paid": {"shipped", "cancelled"},
    "shipped": {"delivered"},
    "delivered": set(),
    "cancelled": set(),
}
DELETABLE = {"cancelled", "delivered"}


class Order(BaseModel):
    user = peewee.ForeignKeyField(User, backref="orders", on_delete="RESTRICT")
    status = peewee.CharField(max_length=16, default="pending")
    total_cents = peewee.BigIntegerField()
    currency = peewee.CharField(max_length=3)
    note = peewee.TextField(null=True)

    # Money in minor units and its currency: v2 shows them together as `total`.
    money_fields: ClassVar = {"total": (total_cents, currency)}

    writable = ("status", "note")

    @classmethod
    def place(
        cls,
        user_id: int,
        items: list[dict],
        note: str | None = None,
        record: Callable[["Order"], None] = lambda order: None,
    ) -> "Order":
        """Create a pending order, taking the stock of every item, all or nothing, at the prices
        read as it starts; `record(order)` writes what else its transaction keeps (its event).

        A product's row is locked from its stock taken to the commit, and every other order for
        it waits meanwhile (a slow link to the database makes each round trip long): whatever
        needs no lock is read and written first, the order and its record included. The items
        are written after the stock is taken: their foreign keys lock each product's key, which
        in the client's order of items, first, could deadlock with a writer locking products in
        id order (a catalogue batch)."""
        # transaction(), not atomic(): inside the caller's transaction this joins it (its
        # rollback undoes everything) instead of adding a savepoint's two round trips.
        with database.transaction():
            if not User.select().where(User.id == user_id).exists():
                raise InvalidReference("/user_id", f"There is no user {user_id}.")
            wanted = [item["product_id"] for item in items]
            products = {p.id: p for p in where_in(Product.id, wanted)}
            for index, item in enumerate(items):
                product = products.get(item["product_id"])
                where = f"/items/{index}/product_id"
                if product is None:
                    raise InvalidReference(where, f"There is no product {item['product_id']}.")
                if not product.active:
                    raise InvalidReference(where, f"Product {product.id} is not for sale.")
            currencies = {p.currency for p in products.values()}
            if len(currencies) > 1:
                raise InvalidReference("/items", "All items of an order must share one currency.")
            total = sum(products[i["product_id"]].price_cents * i["quantity"] for i in items)
            order = cls.create(
                user=user_id,
                total_cents=total,
                currency=currencies.pop(),
                note=note,
            )
            rows = [
                {
                    "order": order.id,
                    "product": item["product_id"],
                    "quantity": item["quantity"],
                    "unit_price_cents": products[item["product_id"]].price_cents,
                }
                for item in items
            ]
            # The items as written, in their order: showing the new order needs no query.
            order.items = [OrderItem(**row) for row in rows]
            record(order)
            # Lock rows in one global order (by product id) so two orders for the same
            # products cannot deadlock each other.
            for item in sorted(items, key=lambda item: item["product_id"]):
                products[item["product_id"]].take_stock(item["quantity"])
            OrderItem.insert_many(rows).execute()
        # The products as their stock was taken, by id: the low-stock check reads no more.
        order.products_taken = [products[i] for i in sorted(products)]
        return order

    @staticmethod
    def with_items(orders) -> list["Order"]:
        """`orders` with their items, in two queries rather than one per order. (Peewee's
        prefetch does the same with a subquery repeating the page's query, and took a third of
        the CPU of a list of orders in building and matching it.)"""
        orders = list(orders)
        items = collections.defaultdict(list)
        for item in where_in(OrderItem.order, [order.id for order in orders]):
            items[item.order_id].append(item)
        for order in orders:
            order.items = items[order.id]
        return orders

    def change(self, changes: dict) -> None:
        """Apply a change of `status` (a state transition) and/or `note`; one that changes no
        value saves nothing."""
        with database.transaction():  # joins the caller's, as in place()
            if "status" in changes and changes["status"] != self.status:
                self._move_to(changes["status"])
            if self.assign(changes):
                self.save()

    def _move_to(self, new_status: str) -> None:
        if new_status not in TRANSITIONS[self.status]:
            raise TransitionNotAllowed(f"An order cannot go from {self.status} to {new_status}.")
        # Compare-and-set: of two concurrent requests moving the same order, one wins and the
        # other sees a conflict, so stock is never given back twice.
        moved = (
            Order.update(status=new_status, updated_at=utc_now())
            .where((Order.id == self.id) & (Order.status == self.status))
            .execute()
        )
        if not moved:
            raise Conflict("The order was changed by another request; read it again.")
        if new_status == "cancelled":
            for item in self.items:
                Product.return_stock(item.product_id, item.quantity)

    def delete_finished(self) -> None:
        if self.status not in DELETABLE:
            raise Conflict(f"A {self.status} order cannot be deleted; cancel it first.")
        self.delete_instance(recursive=True)


class OrderItem(peewee.Model):
    order = peewee.ForeignKeyField(Order, backref="items", on_delete="CASCADE")
    product = peewee.ForeignKeyField(Product, backref="order_items", on_delete="RESTRICT")
    quantity = peewee.IntegerField()
    unit_price_cents = peewee.BigIntegerField()

    class Meta:
        database = database
        legacy_table_names = False
