"""The data model: Peewee models bound to the database chosen at start-up (see models.db)."""

from models.order import Order, OrderItem
from models.product import Product
from models.user import User

MODELS = (User, Product, Order, OrderItem)

__all__ = ["MODELS", "Order", "OrderItem", "Product", "User"]
