"""A product's representation, which more than one handler module writes: it is in every product
event, and orders record product.low_stock too."""

from models import Product
from shopapi.web.representations import versioned


@versioned
def represent_product(product: Product) -> dict:
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
