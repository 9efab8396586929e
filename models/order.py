import collections
import datetime
from collections.abc import Callable
from typing import ClassVar

import peewee

from models.base import BaseModel, where_in
from models.db import database
from models.errors import Conflict, InvalidReference, PendingLimitReached, TransitionNotAllowed
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
    # Why a cancelled order was: `requested` (by its owner or an admin) or `expired` (its hold
    # on the stock ran out, ORDER_HOLD_SECONDS); None while it is not cancelled.
    cancellation_reason = peewee.CharField(max_length=16, null=True)

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
        pending_max: int | None = None,
    ) -> "Order":
        """Create a pending order, taking the stock of every item, all or nothing, at the prices
        read as it starts; `record(order)` writes what else its transaction keeps (its event).
        With `pending_max`, the user's pending orders (this one included) may hold at most that
        many of each product, else PendingLimitReached.

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
            if pending_max is not None:
                # After the stock is taken: the product rows' locks queue the user's concurrent
                # orders for them, so each counts what the ones before it hold.
                _check_pending_held(user_id, items, pending_max)
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
        reason = "requested" if new_status == "cancelled" else None
        # Compare-and-set: of two concurrent requests moving the same order (or a request and
        # its expiry), one wins and the other sees a conflict, so stock is never given back twice.
        now = utc_now()
        moved = (
            Order.update(status=new_status, cancellation_reason=reason, updated_at=now)
            .where((Order.id == self.id) & (Order.status == self.status))
            .execute()
        )
        if not moved:
            raise Conflict("The order was changed by another request; read it again.")
        self.status, self.cancellation_reason, self.updated_at = new_status, reason, now
        if new_status == "cancelled":
            self._return_stock()

    def _return_stock(self) -> None:
        # In product id order, as place() takes it: the global lock order.
        for item in sorted(self.items, key=lambda item: item.product_id):
            Product.return_stock(item.product_id, item.quantity)

    @classmethod
    def overdue(
        cls, held_since: datetime.datetime, batch: int, products: list[int] | None = None
    ) -> list[int]:
        """The ids of up to `batch` pending orders placed before `held_since` (holding one of
        `products`, if given), oldest first: the partial index of pending orders (m0015)."""
        overdue = (cls.status == "pending") & (cls.created_at < held_since)
        query = cls.select(cls.id)
        if products is not None:
            holding = OrderItem.select(OrderItem.order).where(OrderItem.product.in_(products))
            overdue &= cls.id.in_(holding)
        query = query.where(overdue).order_by(cls.created_at, cls.id).limit(batch)
        return [row.id for row in query]

    @classmethod
    def expire(cls, order_id: int, held_since: datetime.datetime) -> "Order | None":
        """Cancel the order as `expired` if it is still pending and was placed before
        `held_since`, giving its stock back: one compare-and-set, so a payment or a cancel at the
        same moment wins or loses whole, and the stock comes back once. The order as expired,
        with its items; None when it was not pending and overdue any more."""
        with database.transaction():
            now = utc_now()
            overdue = (cls.id == order_id) & (cls.status == "pending")
            expired = (
                cls.update(status="cancelled", cancellation_reason="expired", updated_at=now)
                .where(overdue & (cls.created_at < held_since))
                .execute()
            )
            if not expired:
                return None
            (order,) = cls.with_items([cls.get_by_id(order_id)])
            order._return_stock()
        return order

    def delete_finished(self) -> None:
        if self.status not in DELETABLE:
            raise Conflict(f"A {self.status} order cannot be deleted; cancel it first.")
        self.delete_instance(recursive=True)


def _check_pending_held(user_id: int, items: list[dict], pending_max: int) -> None:
    """PendingLimitReached when the user's pending orders, the one being placed included (its
    items are not written yet), would hold more than `pending_max` of a product."""
    wanted = collections.Counter()
    for item in items:
        wanted[item["product_id"]] += item["quantity"]
    held = (
        OrderItem.select(OrderItem.product, peewee.fn.SUM(OrderItem.quantity).alias("held"))
        .join(Order)
        .where(
            (Order.user == user_id)
            & (Order.status == "pending")
            & OrderItem.product.in_(sorted(wanted))
        )
        .group_by(OrderItem.product)
    )
    holding = {row.product_id: row.held for row in held}
    for product_id in sorted(wanted):
        if holding.get(product_id, 0) + wanted[product_id] > pending_max:
            raise PendingLimitReached(
                f"Your pending orders may hold at most {pending_max} of product {product_id}: "
                f"they hold {holding.get(product_id, 0)} and this order asks for "
                f"{wanted[product_id]} more. Pay for or cancel a pending order first."
            )


class OrderItem(peewee.Model):
    order = peewee.ForeignKeyField(Order, backref="items", on_delete="CASCADE")
    product = peewee.ForeignKeyField(Product, backref="order_items", on_delete="RESTRICT")
    quantity = peewee.IntegerField()
    unit_price_cents = peewee.BigIntegerField()

    class Meta:
        database = database
        legacy_table_names = False
