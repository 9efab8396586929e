"""Orders: placed against stock, then moved through their states."""

import peewee

from models import Order, OrderItem, User
from shopapi.pagination import page_of
from shopapi.responses import created


def represent(order: Order) -> dict:
    return {
        "id": order.id,
        "user_id": order.user_id,
        "status": order.status,
        "items": [
            {
                "product_id": item.product_id,
                "quantity": item.quantity,
                "unit_price_cents": item.unit_price_cents,
            }
            for item in order.items
        ],
        "total_cents": order.total_cents,
        "currency": order.currency,
        "note": order.note,
        "created_at": order.created_at,
        "updated_at": order.updated_at,
    }


def _with_items(orders):
    """The orders with their items, in two queries rather than one per order."""
    return peewee.prefetch(orders, OrderItem.select().order_by(OrderItem.id))


def list_orders(page, per_page):
    orders = Order.select().order_by(Order.id)
    return page_of(orders, represent, page=page, per_page=per_page, fetch=_with_items)


def list_user_orders(id, page, per_page):
    User.get_by_id(id)
    orders = Order.select().where(Order.user == id).order_by(Order.id)
    return page_of(orders, represent, page=page, per_page=per_page, fetch=_with_items)


def create_order(body):
    order = Order.place(body["user_id"], body["items"], body.get("note"))
    return created(represent(order), order.id)


def get_order(id):
    return represent(Order.get_by_id(id))


def replace_order(id, body):
    order = Order.get_by_id(id)
    order.change({"note": None, **body})
    return represent(order)


def update_order(id, body):
    order = Order.get_by_id(id)
    order.change(body)
    return represent(order)


def delete_order(id):
    Order.get_by_id(id).delete_finished()
