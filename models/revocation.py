"""Revocation of what a user was issued, when the user is deleted or their password, email or
role changes; of what one login was issued, when a refresh token of it is used twice; and of an
API key, when it is revoked.

Each user has a credentials version, which every access and refresh token issued to them
carries. A change bumps it, in the change's transaction, and records a `Revocation` row of the
new version; the access tokens of an earlier version are then refused (shopapi/auth/revocations.py
keeps every process's view of these rows) and the user's refresh tokens are revoked. Ending a
login records a row naming its `family`, which its access tokens carry, and revokes its refresh
tokens. Revoking an API key records a row naming `api-key:<id>` as its family, so that what
holds the key accepted earlier (an open event stream) ends as a login's does.

The rows are read by id (`id > the last one seen`), so they must become visible in id order: on
PostgreSQL, where sequence values are handed out before commit, recording takes a lock on the
table that orders the recording transactions (reads are not blocked). SQLite has one writer at a
time anyway.
"""

import peewee

from models.db import database, is_postgresql
from models.fields import UTCDateTimeField, utc_now
from models.refresh_token import RefreshToken
from models.user import User

# Revocations recorded by this process: a change here makes its own process look at once
# (shopapi/auth/revocations.py), rather than at its next scheduled refresh.
_recorded_here = 0


def recorded_here() -> int:
    return _recorded_here


class Revocation(peewee.Model):
    """The tokens of `user_id` older than `credentials_version` are revoked since `revoked_at`;
    or, when the row names a `family`, the tokens of that login of the user (or that API key of
    theirs: `api_key_family`)."""

    user_id = peewee.BigIntegerField()  # no foreign key: a deleted user's row stays
    credentials_version = peewee.IntegerField()
    revoked_at = UTCDateTimeField(default=utc_now, index=True)
    family = peewee.CharField(max_length=32, null=True)

    class Meta:
        database = database
        legacy_table_names = False

    @classmethod
    def record(cls, user: User) -> None:
        """Revoke every access and refresh token issued to `user` so far. Call it in the
        transaction of the change (a deletion, a new password, email or role), which then
        commits or rolls back with it; `user.credentials_version` is the new version after."""
        global _recorded_here
        if not database.in_transaction():
            raise RuntimeError("a revocation is recorded in the transaction of its change")
        User.update(credentials_version=User.credentials_version + 1).where(
            User.id == user.id
        ).execute()
        user.credentials_version = (
            User.select(User.credentials_version).where(User.id == user.id).scalar()
        )
        cls._create_in_id_order(user_id=user.id, credentials_version=user.credentials_version)
        RefreshToken.revoke_all_of(user.id)
        _recorded_here += 1

    @classmethod
    def end_login(cls, token: RefreshToken) -> None:
        """Revoke every access and refresh token issued to the login (the family) of `token`: a
        refresh token of it was used twice, so it may have leaked (RFC 9700 4.14.2)."""
        global _recorded_here
        with database.atomic():
            cls._create_in_id_order(
                user_id=token.user_id,
                credentials_version=token.credentials_version,
                family=token.family,
            )
            RefreshToken.revoke_family(token.family)
        _recorded_here += 1

    @classmethod
    def end_api_key(cls, key) -> None:
        """Save `key` (an ApiKey just marked revoked) with a record of its revocation, in one
        transaction: what holds it accepted earlier (an open event stream) ends."""
        global _recorded_here
        with database.atomic():
            key.save()
            cls._create_in_id_order(
                user_id=key.owner_id, credentials_version=0, family=api_key_family(key.id)
            )
        _recorded_here += 1  # committed: this process reads it at once

    @classmethod
    def _create_in_id_order(cls, **fields) -> None:
        if is_postgresql():
            database.execute_sql(f'LOCK TABLE "{cls._meta.table_name}" IN EXCLUSIVE MODE')
        cls.create(**fields)

    @classmethod
    def after(cls, last_id: int) -> list[tuple]:
        """(id, user id, credentials version, revoked at as a POSIX time, family or None) of the
        rows after `last_id`, in id order."""
        return [_row(row) for row in cls.select().where(cls.id > last_id).order_by(cls.id)]

    @classmethod
    def since(cls, cutoff) -> tuple[int, list[tuple]]:
        """The last id, and the rows up to it revoked at or after `cutoff` (a datetime)."""
        last_id = cls.select(peewee.fn.MAX(cls.id)).scalar() or 0
        rows = cls.select().where((cls.id <= last_id) & (cls.revoked_at >= cutoff))
        return last_id, [_row(row) for row in rows.order_by(cls.id)]


def api_key_family(key_id: int) -> str:
    """The family of an API key's revocation row: no login's (those are 32 hex digits)."""
    return f"api-key:{key_id}"


def _row(row: Revocation) -> tuple:
    return row.id, row.user_id, row.credentials_version, row.revoked_at.timestamp(), row.family
