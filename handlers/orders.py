"""Orders: placed against stock, then moved through their states."""

import peewee

from models import Order, OrderItem, User
from shopapi.listing import list_response
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


def list_orders(**params):
    return list_response(Order, Order.select(), params, represent, fetch=_with_items)


def list_user_orders(id, **params):
    User.get_by_id(id)
    orders = Order.select().where(Order.user == id)
    return list_response(Order, orders, params, represent, fetch=_with_items)


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
