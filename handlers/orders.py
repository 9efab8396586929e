"""Orders: placed against stock, then moved through their states.

Without the `admin` scope a caller reaches only its own orders (another user's is 404, as if
absent), places orders only for itself, and may cancel but not pay, ship or deliver.

Each change writes its events (order.created, order.status_changed, order.cancelled, and
product.low_stock for stock an order takes) in its own transaction: see shopapi/events/outbox.py.
"""

import collections

import flask
from connexion.exceptions import Forbidden

from handlers.product_representation import represent_product
from handlers.users import represent as represent_user
from models import Order, OrderItem, Product, User
from models.base import where_in
from models.db import database
from shopapi.auth.security import current_principal
from shopapi.events import outbox
from shopapi.web.configured import configured
from shopapi.web.etags import if_match
from shopapi.web.listing import list_response
from shopapi.web.representations import versioned
from shopapi.web.responses import created


@versioned
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


def _reachable(id: int, load=Order.get_by_id) -> Order:
    order = load(id)
    if not current_principal().reaches(order.user_id):
        raise Order.DoesNotExist
    return order


def _changeable(id: int) -> Order:
    """The order, if reachable, locked for a change that the request's If-Match allows."""
    return if_match(_reachable(id, Order.get_for_update), represent)


def _check_status_change(body: dict, order: Order) -> None:
    status = body.get("status", order.status)
    if status not in (order.status, "cancelled") and not current_principal().is_admin:
        raise Forbidden("Only an admin moves an order on; you may cancel it.")


# What `expand` may bring along (v3), and the scope that reading it on its own takes.
_EXPANSIONS = {"user": "users:read", "items.product": "products:read"}
# The model each expansion reads (a list's ETag follows the tables its body shows).
_EXPANDED_MODELS = {"user": User, "items.product": Product}


def _check_expand(expand: list[str]) -> None:
    scopes = current_principal().scopes
    for path in expand:
        if _EXPANSIONS[path] not in scopes:
            raise Forbidden(f"expand={path} takes the {_EXPANSIONS[path]} scope.")


def _expanded(orders: list[Order], expand: list[str]) -> list[Order]:
    """`orders` (with their items) with what `expand` asks for loaded: one query per relation,
    whatever the number of orders. An order the caller reaches has a user it reaches."""
    if "user" in expand and orders:
        wanted = {order.user_id for order in orders}
        users = {user.id: user for user in where_in(User.id, sorted(wanted))}
        for order in orders:
            order.expanded_user = users[order.user_id]
    items = [item for order in orders for item in order.items]
    if "items.product" in expand and items:
        wanted = {item.product_id for item in items}
        products = {p.id: p for p in where_in(Product.id, sorted(wanted))}
        for item in items:
            item.expanded_product = products[item.product_id]
    return orders


def _shown(expand: list[str]):
    """An order's representation with the expansions `_expanded` loaded."""

    def show(order: Order) -> dict:
        shown = represent(order)
        if "user" in expand:
            shown["user"] = represent_user(order.expanded_user)
        if "items.product" in expand:
            for shown_item, item in zip(shown["items"], order.items, strict=True):
                shown_item["product"] = represent_product(item.expanded_product)
        return shown

    return show


def list_orders(expand=(), **params):
    _check_expand(expand)
    orders = current_principal().only_reachable(Order.select(), Order.user)
    return list_response(
        Order,
        orders,
        params,
        _shown(expand),
        load=lambda page: _expanded(Order.with_items(page), expand),
        reads=(OrderItem, *(_EXPANDED_MODELS[path] for path in expand)),
        kept=["user"] if "user" in expand else [],
    )


def list_user_orders(id, **params):
    # The path's `id` is the user's; the list's `id` filter (an order's) has the same name, and
    # Connexion hands the handler the query's value under it. The user comes from the path, and
    # the filter goes back among the list's parameters.
    user_id = flask.request.view_args["id"]
    if "id" in flask.request.args:
        params["id"] = id
    if not current_principal().reaches(user_id):
        raise User.DoesNotExist
    User.get_by_id(user_id)
    orders = Order.select().where(Order.user == user_id)
    # The user read first is read by the list too: its tag moves when the user goes.
    return list_response(
        Order, orders, params, represent, load=Order.with_items, reads=(OrderItem, User)
    )


def _record_low_stock(order: Order, items: list[dict]) -> None:
    """product.low_stock for each product whose stock these items, just taken by placing
    `order`, brought below the threshold: the products as the order left them, by id."""
    taken = collections.Counter()
    for item in items:
        taken[item["product_id"]] += item["quantity"]
    threshold = configured().settings.low_stock_threshold
    for product in order.products_taken:
        if product.fell_below(threshold, product.stock + taken[product.id]):
            outbox.record("product.low_stock", product, represent_product)


def create_order(body):
    if not current_principal().reaches(body["user_id"]):
        raise Forbidden("You can place orders only for yourself.")
    with database.atomic():
        order = Order.place(
            body["user_id"],
            body["items"],
            body.get("note"),
            record=lambda order: outbox.record(
                "order.created", order, represent, owner_id=order.user_id
            ),
        )
        _record_low_stock(order, body["items"])
    return created(represent(order), order.id)


def get_order(id, expand=()):
    _check_expand(expand)
    order = _reachable(id)
    if expand:
        _expanded(Order.with_items([order]), expand)
    return _shown(expand)(order)


def _changed(id: int, changes: dict) -> dict:
    """Apply `changes` to the order, with the event of its new status if it has one."""
    with database.atomic():
        order = _changeable(id)
        _check_status_change(changes, order)
        status_before = order.status
        order.change(changes)
        if order.status != status_before:
            moved = "order.cancelled" if order.status == "cancelled" else "order.status_changed"
            outbox.record(moved, order, represent, owner_id=order.user_id)
        return represent(order)


def replace_order(id, body):
    return _changed(id, {"note": None, **body})


def update_order(id, body):
    return _changed(id, body)


def delete_order(id):
    _changeable(id).delete_finished()
