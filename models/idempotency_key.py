import datetime
import secrets

import peewee

from models.base import BaseModel
from models.fields import UTCDateTimeField, utc_now


class IdempotencyKey(BaseModel):
    """A client's key for one request, and the answer to it once there is one.

    A key is claimed by inserting its row: the unique (client, key) index lets exactly one of
    any number of concurrent requests, on any worker or host, succeed. Each claim carries a
    random token, and the answer is stored (or the claim released) only under that token, so a
    request whose claim was taken over can no longer write.
    """

    client = peewee.TextField()
    key = peewee.CharField(max_length=255)
    # HMAC-SHA256 of the request (method, path, body), hex: bodies hold passwords, so never a
    # plain hash of them.
    fingerprint = peewee.CharField(max_length=64)
    token = peewee.CharField(max_length=32)
    # When the key was claimed: its lease and its lifetime count from here.
    claimed_at = UTCDateTimeField(index=True)
    # The answer; all None while the request is in flight.
    status = peewee.IntegerField(null=True)
    headers = peewee.TextField(null=True)  # JSON [[name, value], ...]
    body = peewee.BlobField(null=True)

    class Meta:
        indexes = ((("client", "key"), True),)

    @property
    def answered(self) -> bool:
        return self.status is not None

    @classmethod
    def claim(
        cls,
        client: str,
        key: str,
        fingerprint: str,
        lease: datetime.timedelta,
        lifetime: datetime.timedelta,
    ) -> tuple[str | None, "IdempotencyKey | None"]:
        """Claim `key` for a request: `(token, None)` when this request may run, else
        `(None, row)` with the row that holds the key (answered, or in flight within its lease).

        A row older than `lifetime` is replaced, and so is one left in flight for longer than
        `lease` for the same request (its worker died): both are taken over with a
        compare-and-set on their token, so of two requests doing it at once only one wins.
        """
        while True:
            now = utc_now()
            token = secrets.token_hex(16)
            inserted = (
                cls.insert(
                    client=client,
                    key=key,
                    fingerprint=fingerprint,
                    token=token,
                    claimed_at=now,
                )
                .on_conflict_ignore()
                .as_rowcount()
                .execute()
            )
            if inserted:
                return token, None
            held = cls.get_or_none((cls.client == client) & (cls.key == key))
            if held is None:
                continue  # purged since the insert: insert again
            expired = held.claimed_at <= now - lifetime
            abandoned = (
                not held.answered
                and held.claimed_at <= now - lease
                and held.fingerprint == fingerprint
            )
            if not (expired or abandoned):
                return None, held
            unchanged = (cls.id == held.id) & (cls.token == held.token)
            if not expired:
                # An answer stored since it was read came with its request's change: it is
                # replayed, never run again.
                unchanged &= cls.status.is_null()
            taken = (
                cls.update(
                    fingerprint=fingerprint,
                    token=token,
                    claimed_at=now,
                    updated_at=now,
                    status=None,
                    headers=None,
                    body=None,
                )
                .where(unchanged)
                .execute()
            )
            if taken:
                return token, None
            # Another request took it over, or its answer came, first: look again.

    @classmethod
    def answer(
        cls, client: str, key: str, token: str, status: int, headers: str, body: bytes
    ) -> bool:
        """Store the answer under this claim, in the caller's transaction if there is one (the
        request's, with its change); False when the claim was lost meanwhile."""
        return bool(
            cls.update(status=status, headers=headers, body=body, updated_at=utc_now())
            .where(cls._claimed(client, key, token))
            .execute()
        )

    @classmethod
    def release(cls, client: str, key: str, token: str) -> None:
        """Give the key up, so that a retry runs the request again; never once it is answered
        (the answer committed with the request's change, even when the commit's reply was
        lost)."""
        cls.delete().where(cls._claimed(client, key, token) & cls.status.is_null()).execute()

    @classmethod
    def purge(cls, lifetime: datetime.timedelta, batch: int) -> int:
        """Delete up to `batch` rows older than `lifetime`; how many went."""
        expired = cls.select(cls.id).where(cls.claimed_at <= utc_now() - lifetime).limit(batch)
        return cls.delete().where(cls.id.in_(expired)).execute()

    @classmethod
    def _claimed(cls, client: str, key: str, token: str):
        return (cls.client == client) & (cls.key == key) & (cls.token == token)
