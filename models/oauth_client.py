import hmac

import peewee

from models.base import BaseModel
from models.errors import InvalidReference
from models.secret_tokens import digest, generate
from models.user import SCOPES


class OAuthClient(BaseModel):
    """An external system that obtains tokens with the client_credentials grant. It acts as
    itself, not as a user: it reaches no user's records unless granted `admin`."""

    name = peewee.CharField(max_length=200)
    client_id = peewee.CharField(max_length=64, unique=True)
    secret_digest = peewee.CharField(max_length=64)
    scopes = peewee.CharField(max_length=300)

    class Meta:
        table_name = "oauth_client"

    @classmethod
    def register(cls, name: str, scopes: list[str]) -> tuple["OAuthClient", str]:
        """The new client and its secret, which exists only in this return value."""
        unknown = sorted(set(scopes) - set(SCOPES))
        if unknown:
            raise InvalidReference("/scopes", f"Unknown scopes: {', '.join(unknown)}.")
        secret = generate("shs")
        client = cls.create(
            name=name,
            client_id=generate("shc"),
            secret_digest=digest(secret),
            scopes=" ".join(sorted(set(scopes))),
        )
        return client, secret

    @classmethod
    def authenticate(cls, client_id: str, secret: str) -> "OAuthClient | None":
        client = cls.get_or_none(cls.client_id == client_id)
        # Digest an unknown client's secret too, so both failures take the same path.
        expected = client.secret_digest if client else "0" * 64
        if hmac.compare_digest(digest(secret), expected) and client is not None:
            return client
        return None
