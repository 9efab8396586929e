"""The data model: Peewee models bound to the database chosen at start-up (see models.db)."""

from models.api_key import ApiKey
from models.idempotency_key import IdempotencyKey
from models.oauth_client import OAuthClient
from models.order import Order, OrderItem
from models.product import Product
from models.refresh_token import RefreshToken
from models.user import User

# In dependency order: a model's references come before it.
MODELS = (User, Product, Order, OrderItem, ApiKey, OAuthClient, RefreshToken, IdempotencyKey)

__all__ = [
    "MODELS",
    "ApiKey",
    "IdempotencyKey",
    "OAuthClient",
    "Order",
    "OrderItem",
    "Product",
    "RefreshToken",
    "User",
]
