"""The product catalogue."""

from models import Product
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


def replace_product(id, body):
    product = Product.get_by_id(id)
    product.replace(body)
    product.save()
    return represent(product)


def update_product(id, body):
    product = Product.get_by_id(id)
    product.assign(body)
    product.save()
    return represent(product)


def delete_product(id):
    Product.get_by_id(id).delete_unreferenced()
