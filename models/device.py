"""A user's devices (FCM, APNs, Web Push) and the push deliveries of notifications to each:
made at fan-out, attempted under a lease like webhook deliveries (models/delivery.py)."""

import datetime
import hashlib

import peewee

from models.base import BaseModel
from models.db import database, is_postgresql
from models.delivery import Attempt, LeasedDelivery, Retries
from models.event import Event
from models.fields import UTCDateTimeField, utc_now
from models.user import User

PLATFORMS = ("fcm", "apns", "webpush")
# The rounds a registration makes at most, each lost to another user's registration of the
# same token inserting it first (one user's registrations take turns).
REGISTER_ROUNDS = 5
# A claim passes over an owner whose share a concurrent claim took, then tries the next owner's
# delivery; this many owners at most before it gives up until the next poll.
OWNERS_PASSED_OVER = 3
# The advisory locks (PostgreSQL) of push claims: one per owner, in this key space ("push").
OWNER_CLAIMS = 0x70757368


def token_digest(platform: str, token: str) -> str:
    """What identifies a device among all: its platform and token (a Web Push endpoint)."""
    return hashlib.sha256(f"{platform}:{token}".encode()).hexdigest()


class Device(BaseModel):
    user = peewee.ForeignKeyField(User, backref="devices", on_delete="CASCADE")
    platform = peewee.CharField(max_length=8)
    # The FCM registration token, the APNs device token, or the Web Push endpoint: kept as it
    # is (the worker sends to it), shown to no one but as a hint.
    token = peewee.TextField()
    token_digest = peewee.CharField(max_length=64, unique=True)
    # What the API shows of the token: its last characters, or a Web Push endpoint's origin.
    token_hint = peewee.CharField(max_length=300)
    # Web Push only: the browser's P-256 public key and authentication secret (base64url).
    p256dh = peewee.CharField(max_length=100, null=True)
    auth = peewee.CharField(max_length=50, null=True)
    # Set when the push service said the token is no longer valid: nothing more is sent to it.
    removed_at = UTCDateTimeField(null=True)
    removed_reason = peewee.TextField(null=True)

    @classmethod
    def register(
        cls, user_id: int, platform: str, token: str, hint: str, keys: dict, limit: int
    ) -> tuple["Device", bool]:
        """The device with this token, now `user_id`'s and active, and whether it is new. The
        same token registered again is the same device (its Web Push keys renewed); a token
        another user had registered moves to `user_id`, whose app now holds it. Beyond `limit`
        active devices the user's least recently registered is retired (`retire_beyond`).
        Registrations at once answer as they would one after the other."""
        digest = token_digest(platform, token)
        with database.atomic():
            if is_postgresql():
                # One registration of a user's at a time, so that the limit holds. NO KEY: the
                # inserts that refer to the user (orders, devices) need not wait.
                User.select(User.id).where(User.id == user_id).for_update(
                    "FOR NO KEY UPDATE"
                ).execute()
            for round_ in range(1, REGISTER_ROUNDS + 1):
                try:
                    device, created = cls._own(user_id, platform, token, digest, hint, keys)
                    break
                except peewee.IntegrityError:
                    # Another user's registration of this token committed its row first:
                    # found in the next round. (Each round lost is another's won.)
                    if round_ == REGISTER_ROUNDS:
                        raise
            if not created:
                device.p256dh, device.auth = keys.get("p256dh"), keys.get("auth")
                device.removed_at = device.removed_reason = None
                device.save()  # `updated_at`: registered now (the order of retirement)
            cls.retire_beyond(user_id, limit)
        return device, created

    @classmethod
    def _own(
        cls, user_id: int, platform: str, token: str, digest: str, hint: str, keys: dict
    ) -> tuple["Device", bool]:
        """`user_id`'s device with this digest, taken from another user if need be, or a new
        one, and whether it is new; IntegrityError when a concurrent registration inserted the
        digest first (the outer transaction goes on: the insert had a savepoint of its own)."""
        query = cls.select().where(cls.token_digest == digest)
        device = (query.for_update() if is_postgresql() else query).first()
        if device is not None and device.user_id != user_id:
            device.delete_instance()  # the other user's deliveries to it go with it
            device = None
        if device is not None:
            return device, False
        with database.atomic():
            device = cls.create(
                user=user_id,
                platform=platform,
                token=token,
                token_digest=digest,
                token_hint=hint,
                p256dh=keys.get("p256dh"),
                auth=keys.get("auth"),
            )
        return device, True

    @classmethod
    def retire_beyond(cls, user_id: int, limit: int) -> None:
        """Keep `user_id`'s `limit` most recently registered devices active and retire the
        others (removed, with a fixed reason); then delete the removed ones beyond the `limit`
        most recently removed, so that a user has at most twice `limit` devices. A device is
        changed only when it is registered or removed: while active, `updated_at` is when it was
        last registered."""
        active = cls.select(cls.id).where(cls.user == user_id, cls.removed_at.is_null())
        newest_first = (cls.updated_at.desc(), cls.id.desc())
        retired = [device.id for device in active.order_by(*newest_first).offset(limit)]
        if retired:
            reason = (
                f"retired for a newer device: a user's notifications go to at most {limit} devices"
            )
            cls.remove_all(retired, reason)
        removed = cls.select(cls.id).where(cls.user == user_id, cls.removed_at.is_null(False))
        oldest = removed.order_by(cls.removed_at.desc(), cls.id.desc()).offset(limit)
        forgotten = [device.id for device in oldest]
        if forgotten:
            cls.delete().where(cls.id.in_(forgotten)).execute()  # their deliveries with them

    @classmethod
    def remove_all(cls, ids: list[int], reason: str) -> None:
        """Nothing more goes to these devices: removed, and their pending deliveries failed
        unsent. The deliveries first, in the order a worker recording one locks them."""
        now = utc_now()
        PushDelivery.update(status="failed", leased_until=None, updated_at=now).where(
            PushDelivery.device.in_(ids), PushDelivery.status == "pending"
        ).execute()
        cls.update(removed_at=now, removed_reason=reason, updated_at=now).where(
            cls.id.in_(ids)
        ).execute()

    @classmethod
    def active_of(cls, user_ids: set[int], limit: int) -> dict[int, list["Device"]]:
        """The devices that notifications go to, of each of `user_ids`: the `limit` most
        recently registered (a user may have more from before the limit was lowered)."""
        devices: dict[int, list[Device]] = {}
        if user_ids:
            query = cls.select().where(cls.user.in_(list(user_ids)), cls.removed_at.is_null())
            for device in query.order_by(cls.updated_at.desc(), cls.id.desc()):
                owned = devices.setdefault(device.user_id, [])
                if len(owned) < limit:
                    owned.append(device)
        return devices


class PushDelivery(LeasedDelivery):
    """One event's notification to one device."""

    device = peewee.ForeignKeyField(Device, backref="deliveries", on_delete="CASCADE")
    event = peewee.ForeignKeyField(Event, on_delete="CASCADE")

    @classmethod
    def fan_out(cls, events: list[Event], devices_per_user: int) -> None:
        """A delivery of each of `events` to each active device of its owner, at most
        `devices_per_user` of them (in the fan-out's transaction). `events` are those that
        notify someone."""
        devices = Device.active_of({event.owner_id for event in events}, devices_per_user)
        # Owner by owner: each delivery moves its owner's counter (m0018), which two fan-outs
        # then take in the same order.
        owned = sorted(
            (event.owner_id, device.id, event.id)
            for event in events
            for device in devices.get(event.owner_id, ())
        )
        if owned:
            rows = [{"device": device, "event": event} for _, device, event in owned]
            cls.insert_many(rows).execute()

    @classmethod
    def claim_due(cls, attempt_seconds: float, per_owner: int = 1) -> "PushDelivery | None":
        """Lease the oldest push delivery due now to an active device whose owner has fewer
        than `per_owner` deliveries being attempted (with the device and the event), for an
        attempt that ends within `attempt_seconds`; or None. So one owner's push services, slow
        or silent, hold at most `per_owner` of the workers' threads, however many devices the
        owner has; the others go on with other owners' notifications."""
        passed_over: list[int] = []
        for _ in range(OWNERS_PASSED_OVER + 1):
            now = utc_now()
            query = (
                cls.select(cls, Device, Event)
                .join_from(cls, Device)
                .join_from(cls, Event)
                .where(
                    cls.due(now),
                    Device.removed_at.is_null(),
                    Device.user.not_in(cls._owners_attempting(per_owner, now)),
                    Device.user.not_in(passed_over),
                )
                .order_by(cls.id)
            )
            with database.atomic():
                delivery = cls.lock_first(query)
                if delivery is None:
                    return None
                owner = delivery.device.user_id
                if cls._has_room(owner, per_owner):
                    delivery.lease(attempt_seconds)
                    return delivery
            passed_over.append(owner)  # its share taken by a claim that committed meanwhile
        return None

    @classmethod
    def _owners_attempting(cls, count: int, now: datetime.datetime) -> peewee.Select:
        """The owners with at least `count` deliveries being attempted."""
        return (
            cls.select(Device.user)
            .join(Device)
            .where(cls.leased(now))
            .group_by(Device.user)
            .having(peewee.fn.COUNT(cls.id) >= count)
        )

    @classmethod
    def _has_room(cls, owner: int, per_owner: int) -> bool:
        """Has `owner` fewer than `per_owner` deliveries being attempted? Asked in the claiming
        transaction. On PostgreSQL claims of one owner's deliveries take turns here (a lock
        held until the claim commits), so that each counts the leases committed before it;
        SQLite's transactions take turns already."""
        if is_postgresql():
            database.execute_sql(
                "SELECT pg_advisory_xact_lock(%s, %s)", (OWNER_CLAIMS, owner % 2**31)
            )
        attempting = cls.select().join(Device).where(cls.leased(utc_now()), Device.user == owner)
        return attempting.count() < per_owner

    def record(
        self,
        outcome: dict,
        verdict: str,
        retries: Retries,
        retry_after: float | None = None,
    ) -> tuple[int, str]:
        """Keep the attempt and apply `verdict` (`delivered`, `retry`, `unregistered`: the token
        is no longer valid, which removes the device, or `failed`). A retry waits for the
        backoff, and at least `retry_after` seconds when the service said so. Returns the
        attempt's number and its verdict (`failed` once a retry has no attempts left)."""

        def decided(number: int) -> str:
            return retries.after_failure(number) if verdict == "retry" else verdict

        not_before = None
        if retry_after is not None:
            not_before = utc_now() + datetime.timedelta(seconds=retry_after)
        with database.atomic():
            number, settled, _ = self.record_attempt(
                PushAttempt, outcome, decided, retries, not_before
            )
            if settled == "unregistered":
                # A fixed reason: the service's own words may come from any host (a Web Push
                # endpoint is the client's choice); the attempt log, an admin's, keeps them.
                status = outcome["response_status"]
                reason = f"the push service answered {status}: the token is no longer valid"
                # Nothing more goes to it: its other pending deliveries fail unsent.
                Device.remove_all([self.device_id], reason)
        return number, settled


class PushAttempt(Attempt):
    delivery = peewee.ForeignKeyField(PushDelivery, backref="attempt_log", on_delete="CASCADE")
