"""The product catalogue."""

from models import Product
from shopapi.etags import if_match
from shopapi.listing import list_response
from shopapi.representations import versioned
from shopapi.responses import created


@versioned
def represent(product: Product) -> dict:
    return {
        "id": product.id,
        "sku": product.sku,
        "name": product.name,
        "description": product.description,
        "price_cents": product.price_cents,
        "currency": product.currency,
        "stock": product.stock,
        "category": product.category,
        "active": product.active,
        "created_at": product.created_at,
        "updated_at": product.updated_at,
    }


def list_products(**params):
    return list_response(Product, Product.select(), params, represent)


def create_product(body):
    product = Product.new(body)
    return created(represent(product), product.id)


def get_product(id):
    return represent(Product.get_by_id(id))


def _changeable(id: int) -> Product:
    """The product, locked for a change that the request's If-Match allows."""
    return if_match(Product.get_for_update(id), represent)


def replace_product(id, body):
    product = _changeable(id)
    product.replace(body)
    product.save()
    return represent(product)


def update_product(id, body):
    product = _changeable(id)
    product.assign(body)
    product.save()
    return represent(product)


def delete_product(id):
    _changeable(id).delete_unreferenced()
