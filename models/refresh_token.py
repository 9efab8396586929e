import base64
import dataclasses
import datetime
import hashlib
import hmac
import secrets

import peewee

from models.base import BaseModel
from models.fields import UTCDateTimeField, utc_now
from models.secret_tokens import digest, generate
from models.user import User

# Seconds after a refresh token's use in which presenting it again answers its successor once
# more, rather than counting as a reuse: a client's concurrent refreshes (two tabs, a retry after
# a lost answer) would otherwise end its own login. Whoever presents it in that time gets the
# same successor, so a leak is still found, at the successor's second use. The use's time and
# the retry's may come from two hosts' clocks: a skew between them shifts the grace as much.
REUSE_GRACE_SECONDS = 5


class RefreshTokenReused(Exception):
    """A refresh token was presented again after its grace: it may have leaked, and its login
    is to be ended (Revocation.end_login)."""


@dataclasses.dataclass(frozen=True)
class Issued:
    """A refresh token just issued: its secret, its login (family), and when (the access token
    that goes with it is issued at that second, so that handing the pair out again gives the
    same pair)."""

    secret: str
    family: str
    at: datetime.datetime


def _successor_secret(secret: str, key: bytes) -> str:
    """The secret of the successor of the refresh token `secret`, derived with the server's
    `key`: an answer within the grace is the same one without keeping the secret anywhere, and
    nobody without the key can derive it."""
    mac = hmac.new(key, secret.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()
    return "shr_" + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


class RefreshToken(BaseModel):
    """A single-use refresh token. Each use issues its successor in the same family; presenting
    a used one again (after REUSE_GRACE_SECONDS) means it leaked, so the family (every token
    descended from one login) is revoked (OAuth 2.0 Security BCP, RFC 9700 4.14.2)."""

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
    def start(cls, user: User, scope: str, client_id: str | None, ttl: int) -> Issued:
        """A refresh token for a new login."""
        issued = Issued(generate("shr"), secrets.token_hex(16), utc_now())
        cls._store(issued, user.id, scope, client_id, ttl, user.credentials_version)
        return issued

    @classmethod
    def _store(
        cls, issued: Issued, user_id: int, scope: str, client_id, ttl: int, credentials_version
    ) -> None:
        cls.create(
            digest=digest(issued.secret),
            family=issued.family,
            user=user_id,
            client_id=client_id,
            scope=scope,
            expires_at=issued.at + datetime.timedelta(seconds=ttl),
            credentials_version=credentials_version,
        )

    @classmethod
    def find(cls, secret: str) -> "RefreshToken | None":
        return cls.get_or_none(cls.digest == digest(secret))

    @classmethod
    def rotate(cls, token: "RefreshToken", secret: str, key: bytes, ttl: int) -> Issued:
        """Use `token` (whose secret is `secret`): its successor, whose secret `key` derives.
        LookupError when it is expired or revoked, or was issued under credentials the user has
        changed since; RefreshTokenReused when it was used before, longer ago than the grace."""
        if (
            token.revoked_at is not None
            or token.expires_at <= utc_now()
            # Changes revoke the user's tokens (revoke_all_of); this also refuses a token issued
            # by a login that raced with the change and committed after it.
            or token.credentials_version != token.user.credentials_version
        ):
            raise LookupError("expired or revoked refresh token")
        successor = _successor_secret(secret, key)
        with cls._meta.database.atomic():
            now = utc_now()
            # Compare-and-set: of two requests racing with one token, one wins and the other
            # finds it used (on PostgreSQL, once the winner has committed its successor).
            taken = (
                cls.update(used_at=now, updated_at=now)
                .where((cls.id == token.id) & cls.used_at.is_null() & cls.revoked_at.is_null())
                .execute()
            )
            if taken:
                issued = Issued(successor, token.family, now)
                cls._store(
                    issued,
                    token.user_id,
                    token.scope,
                    token.client_id,
                    ttl,
                    token.credentials_version,
                )
                return issued
        return cls._again(token, successor)

    @classmethod
    def _again(cls, token: "RefreshToken", successor: str) -> Issued:
        """The successor of `token`, used already, once more if that was within the grace and
        nothing has been revoked since."""
        used_at, revoked_at = (
            cls.select(cls.used_at, cls.revoked_at).where(cls.id == token.id).tuples().get()
        )
        if revoked_at is not None:
            raise LookupError("revoked refresh token")
        grace = datetime.timedelta(seconds=REUSE_GRACE_SECONDS)
        if used_at is not None and utc_now() - used_at <= grace:
            # The successor as derived, still valid: a token used before successors were
            # derived has a random one, not found, and its second use is a reuse.
            issued = cls.find(successor)
            if issued is not None and issued.family == token.family and issued.revoked_at is None:
                return Issued(successor, token.family, used_at)
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
