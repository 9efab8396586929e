"""Credentials: partner API keys, registered OAuth clients, refresh tokens."""

import peewee

from models.fields import UTCDateTimeField, utc_now


def up(db: peewee.Database) -> None:
    class User(peewee.Model):
        class Meta:
            database = db
            legacy_table_names = False

    class Base(peewee.Model):
        created_at = UTCDateTimeField(default=utc_now)
        updated_at = UTCDateTimeField(default=utc_now)

        class Meta:
            database = db
            legacy_table_names = False

    class ApiKey(Base):
        name = peewee.CharField(max_length=200)
        prefix = peewee.CharField(max_length=12)
        digest = peewee.CharField(max_length=64, unique=True)
        scopes = peewee.CharField(max_length=300)
        owner = peewee.ForeignKeyField(User, on_delete="CASCADE")
        expires_at = UTCDateTimeField(null=True)
        revoked_at = UTCDateTimeField(null=True)

    class OAuthClient(Base):
        name = peewee.CharField(max_length=200)
        client_id = peewee.CharField(max_length=64, unique=True)
        secret_digest = peewee.CharField(max_length=64)
        scopes = peewee.CharField(max_length=300)

        class Meta:
            table_name = "oauth_client"

    class RefreshToken(Base):
        digest = peewee.CharField(max_length=64, unique=True)
        family = peewee.CharField(max_length=32, index=True)
        user = peewee.ForeignKeyField(User, on_delete="CASCADE")
        client_id = peewee.CharField(max_length=64, null=True)
        scope = peewee.CharField(max_length=300)
        expires_at = UTCDateTimeField()
        used_at = UTCDateTimeField(null=True)
        revoked_at = UTCDateTimeField(null=True)

    db.create_tables([ApiKey, OAuthClient, RefreshToken])
