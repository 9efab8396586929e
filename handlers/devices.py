"""Devices: a user registers the devices that get their push notifications (FCM, APNs, Web
Push), and an admin reads what was sent to each. Without `admin` a caller reaches only its own
user's devices; another user's are 404, as if absent. Tokens are never shown back.
"""

from urllib.parse import urlsplit

from connexion.exceptions import ProblemException
from cryptography.hazmat.primitives.asymmetric import ec

from handlers.webhooks import represent_delivery, with_attempts
from models import Device, PushAttempt, PushDelivery, User
from models.errors import InvalidReference
from shopapi.auth.security import current_principal
from shopapi.events.push.base64url import b64url_decode
from shopapi.web.configured import configured
from shopapi.web.listing import list_response
from shopapi.web.responses import created


def represent(device: Device) -> dict:
    return {
        "id": device.id,
        "platform": device.platform,
        "token_hint": device.token_hint,
        "removed_at": device.removed_at,
        "removed_reason": device.removed_reason,
        "created_at": device.created_at,
        "updated_at": device.updated_at,
    }


def _user(user_id: int) -> int:
    if not current_principal().reaches(user_id):
        raise User.DoesNotExist
    return User.get_by_id(user_id).id


def _device(user_id: int, id: int) -> Device:
    return Device.get((Device.user == _user(user_id)) & (Device.id == id))


def _token_of(body: dict) -> tuple[str, str, dict]:
    """The device's token (a Web Push endpoint), what the API shows of it, and its Web Push
    keys. The contract gives each platform its shape; what it cannot say is 422."""
    if body["platform"] == "webpush":
        return _subscription(body["subscription"])
    token = body["token"].lower() if body["platform"] == "apns" else body["token"]
    return token, "…" + token[-6:], {}


def _subscription(subscription: dict) -> tuple[str, str, dict]:
    endpoint, keys = subscription["endpoint"], subscription["keys"]
    refusal = configured().webpush_endpoint_refusal(endpoint)
    if refusal:
        raise InvalidReference("/subscription/endpoint", f"The endpoint {refusal}.")
    try:
        ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b64url_decode(keys["p256dh"]))
    except ValueError:
        raise InvalidReference(
            "/subscription/keys/p256dh", "This is not a P-256 public key."
        ) from None
    parts = urlsplit(endpoint)
    return endpoint, f"{parts.scheme}://{parts.netloc}", keys


def list_devices(user_id, **params):
    owner = _user(user_id)
    devices = Device.select().where(Device.user == owner)
    # The user read first is read by the list too: its tag moves when the user goes, and with
    # that user's devices alone, whoever reads them.
    return list_response(Device, devices, params, represent, reads=(User,), owners=(owner,))


def register_device(user_id, body):
    token, hint, keys = _token_of(body)
    limit = configured().settings.push_devices_per_user
    device, new = Device.register(_user(user_id), body["platform"], token, hint, keys, limit)
    return created(represent(device), device.id) if new else represent(device)


def get_device(user_id, id):
    return represent(_device(user_id, id))


def delete_device(user_id, id):
    _device(user_id, id).delete_instance()  # its deliveries go with it (ON DELETE CASCADE)


def list_device_deliveries(user_id, device_id, **params):
    device = _device(user_id, device_id)
    deliveries = PushDelivery.select().where(PushDelivery.device == device)
    fetch = with_attempts(PushAttempt)
    return list_response(
        PushDelivery,
        deliveries,
        params,
        represent_delivery,
        fetch=fetch,
        reads=(PushAttempt, Device, User),  # and the device and its user, read first
        owners=(device.user_id,),  # its tag moves with that user's deliveries alone
    )


def get_vapid_public_key():
    public_key = configured().vapid_public_key
    if public_key is None:
        raise ProblemException(
            status=404, title="Not Found", detail="This server does not send Web Push."
        )
    return {"public_key": public_key}
