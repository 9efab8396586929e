"""Partner API keys: issued by an admin, shown once, kept as a hash, revocable. A revoked key
stays on record in the table but is gone from the API (404)."""

import datetime

from models import ApiKey
from models.errors import InvalidReference
from shopapi.auth.security import current_principal
from shopapi.web.listing import list_response
from shopapi.web.responses import created


def represent(key: ApiKey) -> dict:
    return {
        "id": key.id,
        "name": key.name,
        "prefix": key.prefix,
        "scopes": key.scopes.split(),
        "owner_id": key.owner_id,
        "expires_at": key.expires_at,
        "created_at": key.created_at,
        "updated_at": key.updated_at,
    }


def _unrevoked():
    return ApiKey.select().where(ApiKey.revoked_at.is_null())


def list_api_keys(**params):
    return list_response(ApiKey, _unrevoked(), params, represent)


def create_api_key(body):
    owner_id = body.get("owner_id", current_principal().user_id)
    if owner_id is None:
        raise InvalidReference("/owner_id", "These credentials act for no user: name the owner.")
    expires_at = body.get("expires_at")
    key, secret = ApiKey.issue(
        body["name"],
        body["scopes"],
        owner_id,
        datetime.datetime.fromisoformat(expires_at.upper()) if expires_at else None,
    )
    return created({**represent(key), "key": secret}, key.id)


def get_api_key(id):
    return represent(_unrevoked().where(ApiKey.id == id).get())


def revoke_api_key(id):
    _unrevoked().where(ApiKey.id == id).get().revoke()
