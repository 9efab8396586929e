import datetime
import secrets

import peewee

from models.base import BaseModel
from models.fields import UTCDateTimeField, utc_now
from models.secret_tokens import digest, generate
from models.user import User


class RefreshTokenReused(Exception):
    """A refresh token was presented after it had been used: its whole family is now revoked."""


class RefreshToken(BaseModel):
    """A single-use refresh token. Each use issues its successor in the same family; presenting
    a used one again means it leaked, so the family (every token descended from one login) is
    revoked (OAuth 2.0 Security BCP, RFC 9700 4.14.2)."""

    digest = peewee.CharField(max_length=64, unique=True)
    family = peewee.CharField(max_length=32, index=True)
    user = peewee.ForeignKeyField(User, backref="refresh_tokens", on_delete="CASCADE")
    client_id = peewee.CharField(max_length=64, null=True)
    scope = peewee.CharField(max_length=300)
    expires_at = UTCDateTimeField()
    used_at = UTCDateTimeField(null=True)
    revoked_at = UTCDateTimeField(null=True)
    # The user's credentials version at the login; a token of an older one is revoked.
    credentials_version = peewee.IntegerField(default=0)

    @classmethod
    def start(cls, user: User, scope: str, client_id: str | None, ttl: int) -> str:
        """A refresh token for a new login; returns the secret."""
        family = secrets.token_hex(16)
        return cls._issue(user.id, scope, client_id, ttl, family, user.credentials_version)

    @classmethod
    def _issue(
        cls, user_id: int, scope: str, client_id, ttl: int, family: str, credentials_version: int
    ) -> str:
        secret = generate("shr")
        cls.create(
            digest=digest(secret),
            family=family,
            user=user_id,
            client_id=client_id,
            scope=scope,
            expires_at=utc_now() + datetime.timedelta(seconds=ttl),
            credentials_version=credentials_version,
        )
        return secret

    @classmethod
    def find(cls, secret: str) -> "RefreshToken | None":
        return cls.get_or_none(cls.digest == digest(secret))

    @classmethod
    def rotate(cls, token: "RefreshToken", ttl: int) -> str:
        """Use `token`: the secret of its successor. LookupError when it is expired or revoked,
        or was issued under credentials the user has changed since; RefreshTokenReused when it
        was used before (its family is then revoked)."""
        if (
            token.revoked_at is not None
            or token.expires_at <= utc_now()
            # Changes revoke the user's tokens (revoke_all_of); this also refuses a token issued
            # by a login that raced with the change and committed after it.
            or token.credentials_version != token.user.credentials_version
        ):
            raise LookupError("expired or revoked refresh token")
        with cls._meta.database.atomic():
            now = utc_now()
            # Compare-and-set: of two requests racing with one token, one wins and the other
            # is a reuse.
            taken = (
                cls.update(used_at=now, updated_at=now)
                .where((cls.id == token.id) & cls.used_at.is_null() & cls.revoked_at.is_null())
                .execute()
            )
            if taken:
                return cls._issue(
                    token.user_id,
                    token.scope,
                    token.client_id,
                    ttl,
                    token.family,
                    token.credentials_version,
                )
        cls.revoke_family(token.family)
        raise RefreshTokenReused(token.family)

    @classmethod
    def revoke_family(cls, family: str) -> None:
        now = utc_now()
        cls.update(revoked_at=now, updated_at=now).where(
            (cls.family == family) & cls.revoked_at.is_null()
        ).execute()

    @classmethod
    def revoke_all_of(cls, user_id: int) -> None:
        """Revoke every refresh token of the user (a change of their credentials or role)."""
        now = utc_now()
        cls.update(revoked_at=now, updated_at=now).where(
            (cls.user == user_id) & cls.revoked_at.is_null()
        ).execute()
