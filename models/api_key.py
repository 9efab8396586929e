import datetime

import peewee

from models.base import BaseModel
from models.errors import InvalidReference
from models.fields import UTCDateTimeField, utc_now
from models.revocation import Revocation
from models.secret_tokens import digest, generate
from models.user import ROLE_SCOPES, User

# Characters of a key kept in clear, so that an admin can tell keys apart in a list.
SHOWN_PREFIX = 12


class ApiKey(BaseModel):
    """A partner's key: acts as its owner, limited to its scopes, until revoked or expired."""

    name = peewee.CharField(max_length=200)
    prefix = peewee.CharField(max_length=SHOWN_PREFIX)
    digest = peewee.CharField(max_length=64, unique=True)
    scopes = peewee.CharField(max_length=300)
    owner = peewee.ForeignKeyField(User, backref="api_keys", on_delete="CASCADE")
    expires_at = UTCDateTimeField(null=True)
    revoked_at = UTCDateTimeField(null=True)

    @classmethod
    def issue(
        cls, name: str, scopes: list[str], owner_id: int, expires_at: datetime.datetime | None
    ) -> tuple["ApiKey", str]:
        """The new key and its secret, which exists only in this return value."""
        owner = User.get_or_none(User.id == owner_id)
        if owner is None:
            raise InvalidReference("/owner_id", f"There is no user {owner_id}.")
        beyond_role = sorted(set(scopes) - ROLE_SCOPES[owner.role])
        if beyond_role:
            raise InvalidReference(
                "/scopes", f"A {owner.role} cannot hold {', '.join(beyond_role)}."
            )
        if expires_at is not None and expires_at <= utc_now():
            raise InvalidReference("/expires_at", "The expiry time has already passed.")
        secret = generate("shk")
        key = cls.create(
            name=name,
            prefix=secret[:SHOWN_PREFIX],
            digest=digest(secret),
            scopes=" ".join(sorted(set(scopes))),
            owner=owner,
            expires_at=expires_at,
        )
        return key, secret

    @classmethod
    def find(cls, secret: str) -> tuple["ApiKey", str, int] | None:
        """The key with this secret, its owner's role and credentials version; or None."""
        row = (
            cls.select(cls, User.role, User.credentials_version)
            .join(User)
            .where(cls.digest == digest(secret))
            .objects()
            .first()
        )
        return (row, row.role, row.credentials_version) if row else None

    @property
    def usable(self) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > utc_now())

    def revoke(self) -> None:
        """Refused from now on; the event streams it holds open end within seconds, on every
        process (models/revocation.py)."""
        if self.revoked_at is None:
            self.revoked_at = utc_now()
            Revocation.end_api_key(self)
