"""The product catalogue. Each change writes its event (product.created, product.updated,
product.low_stock) in its own transaction: see shopapi/events/outbox.py."""

import peewee

from handlers.product_representation import represent_product as represent
from models import Product
from models.db import database
from shopapi.events import outbox
from shopapi.web.configured import configured
from shopapi.web.etags import if_match
from shopapi.web.listing import list_response
from shopapi.web.responses import created


def list_products(**params):
    return list_response(Product, Product.select(), params, represent)


def upsert_products(body):
    """v3's catalogue batch: each item created, or replaced by its SKU, all or nothing. All is
    checked before the one short transaction that writes it (models/product.py)."""
    items = body["products"]
    Product.check_unique_skus([item["sku"] for item in items])
    try:
        batch = _upserted(items)
    except peewee.IntegrityError:
        # A concurrent batch created some of these SKUs after this one looked: they are known
        # now, and replaced as such.
        batch = _upserted(items)
    return {"data": [represent(product) for product in batch.products]}


def _upserted(items: list[dict]):
    threshold = configured().settings.low_stock_threshold
    batch = Product.plan_batch(items)  # before any lock
    with database.atomic():
        batch.write()
        events = []
        for event_type, product, stock_before in batch.changes:
            events.append((event_type, product))
            if stock_before is not None and product.fell_below(threshold, stock_before):
                events.append(("product.low_stock", product))
        outbox.record_each(events, represent)
    return batch


def create_product(body):
    with database.atomic():
        product = Product.new(body)
        outbox.record("product.created", product, represent)
    return created(represent(product), product.id)


def get_product(id):
    return represent(Product.get_by_id(id))


def _changeable(id: int) -> Product:
    """The product, locked for a change that the request's If-Match allows."""
    return if_match(Product.get_for_update(id), represent)


def _changed(id: int, change) -> dict:
    """Apply `change(product)` to the product, locked, and save it with its events; a change
    that changes no value is no change (no new updated_at, ETag or event)."""
    with database.atomic():
        product = _changeable(id)
        stock_before = product.stock
        if not change(product):
            return represent(product)
        product.save()
        outbox.record("product.updated", product, represent)
        if product.fell_below(configured().settings.low_stock_threshold, stock_before):
            outbox.record("product.low_stock", product, represent)
        return represent(product)


def replace_product(id, body):
    return _changed(id, lambda product: product.replace(body))


def update_product(id, body):
    return _changed(id, lambda product: product.assign(body))


def delete_product(id):
    _changeable(id).delete_unreferenced()
