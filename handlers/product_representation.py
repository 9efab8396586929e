"""A product's representation, which more than one handler module writes: it is in every product
event, and orders record product.low_stock and expand their items' products."""

from models import Product


def represent_product(product: Product) -> dict:
    # Every field: each version's contract shows those it has (shopapi/web/representations.py).
    return product.fields_by_name()
