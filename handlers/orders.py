"""Orders: placed against stock, then moved through their states; a
pending one expires after ORDER_HOLD_SECONDS (handlers/order_holds.py sweeps for them).

Without the `admin` scope a caller reaches only its own orders (another user's is 404, as if
absent), places orders only for itself, and may cancel but not pay, ship or deliver.

Each change writes its events (order.created, order.status_changed, order.cancelled, and
product.low_stock for stock an order takes) in its own transaction: see shopapi/events/outbox.py.
"""

import collections
import datetime

import flask
from connexion.exceptions import Forbidden

from handlers.product_representation import represent_product
from handlers.users import represent as represent_user
from models import Order, OrderItem, Product, User
from models.base import where_in
from models.db import database
from models.errors import OutOfStock
from models.fields import utc_now
from shopapi.auth.security import Principal, current_principal
from shopapi.events import outbox
from shopapi.web.configured import configured
from shopapi.web.etags import if_match
from shopapi.web.listing import list_response
from shopapi.web.responses import created


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
        "cancellation_reason": order.cancellation_reason,
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
    principal = current_principal()
    orders = principal.only_reachable(Order.select(), Order.user)
    return list_response(
        Order,
        orders,
        params,
        _shown(expand),
        load=lambda page: _expanded(Order.with_items(page), expand),
        reads=(OrderItem, *(_EXPANDED_MODELS[path] for path in expand)),
        owners=principal.owners_reached(),
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
        Order,
        orders,
        params,
        represent,
        load=Order.with_items,
        reads=(OrderItem, User),
        owners=(user_id,),
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


# Who expires an order, as its event names the actor (shown to admins only).
EXPIRER = Principal(subject="server:order-hold", scopes=frozenset(), user_id=None)
# Orders expired per query of the overdue ones; a sweep goes on while it finds this many.
EXPIRY_BATCH = 100


def expire_overdue(hold_seconds: int, products: list[int] | None = None) -> int:
    """Expire up to EXPIRY_BATCH pending orders placed more than `hold_seconds` ago (holding one of
    `products`, if given), each in a transaction of its own with its event; how many expired
    here (an order paid, cancelled or expired elsewhere meanwhile is left as it is)."""
    held_since = utc_now() - datetime.timedelta(seconds=hold_seconds)
    expired = 0
    for order_id in Order.overdue(held_since, EXPIRY_BATCH, products):
        with database.atomic():
            order = Order.expire(order_id, held_since)
            if order is not None:
                outbox.record(
                    "order.cancelled", order, represent, owner_id=order.user_id, actor=EXPIRER
                )
                expired += 1
    return expired


def _pending_max() -> int | None:
    """How much of one product the caller's pending orders may hold: admins and partners (who
    write the catalogue) are not limited."""
    principal = current_principal()
    if principal.is_admin or "products:write" in principal.scopes:
        return None
    return configured().settings.pending_quantity_per_product_max


def _placed(body: dict) -> Order:
    with database.atomic():
        order = Order.place(
            body["user_id"],
            body["items"],
            body.get("note"),
            record=lambda order: outbox.record(
                "order.created", order, represent, owner_id=order.user_id
            ),
            pending_max=_pending_max(),
        )
        _record_low_stock(order, body["items"])
    return order


def create_order(body):
    if not current_principal().reaches(body["user_id"]):
        raise Forbidden("You can place orders only for yourself.")
    try:
        order = _placed(body)
    except OutOfStock:
        # Stock held by orders past their hold is not anyone's any more: expire them now
        # rather than at the next sweep, and try once more.
        products = sorted({item["product_id"] for item in body["items"]})
        if not expire_overdue(configured().settings.order_hold_seconds, products):
            raise
        order = _placed(body)
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
