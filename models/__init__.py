"""The data model: Peewee models bound to the database chosen at start-up (see models.db)."""

from models.api_key import ApiKey
from models.device import Device, PushAttempt, PushDelivery
from models.event import Event
from models.idempotency_key import IdempotencyKey
from models.oauth_client import OAuthClient
from models.order import Order, OrderItem
from models.product import Product
from models.refresh_token import RefreshToken
from models.revocation import Revocation
from models.user import User
from models.webhook import Delivery, DeliveryAttempt, Webhook

# In dependency order: a model's references come before it.
MODELS = (
    User,
    Product,
    Order,
    OrderItem,
    ApiKey,
    OAuthClient,
    RefreshToken,
    Revocation,
    IdempotencyKey,
    Event,
    Webhook,
    Delivery,
    DeliveryAttempt,
    Device,
    PushDelivery,
    PushAttempt,
)

__all__ = [
    "MODELS",
    "ApiKey",
    "Delivery",
    "DeliveryAttempt",
    "Device",
    "Event",
    "IdempotencyKey",
    "OAuthClient",
    "Order",
    "OrderItem",
    "Product",
    "PushAttempt",
    "PushDelivery",
    "RefreshToken",
    "Revocation",
    "User",
    "Webhook",
]
