import dataclasses
import hmac
from collections.abc import Callable

import peewee

from models.base import BaseModel, Written
from models.errors import Conflict, CurrentPasswordRequired
from models.passwords import hash_password, verify_login, verify_password

ROLES = ("customer", "partner", "admin")
SCOPES = (
    "users:read",
    "users:write",
    "products:read",
    "products:write",
    "orders:read",
    "orders:write",
    "webhooks",
    "admin",
)
# What each role may be granted. Customers and partners reach only their own user record and
# orders (see models/visibility.py); partners also keep a catalogue and register
# webhooks; `admin` reaches all.
ROLE_SCOPES = {
    "customer": frozenset(SCOPES) - {"products:write", "webhooks", "admin"},
    "partner": frozenset(SCOPES) - {"admin"},
    "admin": frozenset(SCOPES),
}


def normalised_email(email: str) -> str:
    """An email as it is stored and looked up: emails are unique regardless of case."""
    return email.lower()


class User(BaseModel):
    email = peewee.CharField(max_length=254, unique=True)
    name = peewee.CharField(max_length=200)
    role = peewee.CharField(max_length=16, default="customer")
    password_hash = peewee.CharField(max_length=200)
    # Bumped by every change that revokes what the user was issued (models/revocation.py);
    # each access and refresh token carries the version it was issued under.
    credentials_version = peewee.IntegerField(default=0)

    writable = ("email", "name", "role", "password")

    @property
    def password(self):
        raise AttributeError("a password is write-only; use check_password()")

    @password.setter
    def password(self, plain: str) -> None:
        self.password_hash = hash_password(plain)

    def check_password(self, plain: str) -> bool:
        return verify_password(plain, self.password_hash)

    @classmethod
    def with_email(cls, email: str) -> "User | None":
        return cls.get_or_none(cls.email == normalised_email(email))

    @staticmethod
    def logs_in(user: "User | None", password: str) -> bool:
        """Whether `password` logs in to `user`; as slow when there is no user (an unknown
        email) as for a wrong password."""
        return verify_login(password, user.password_hash if user else None)

    @classmethod
    def ensure_admin(cls, email: str, password: str) -> None:
        """Create an admin with this email unless a user has it (bootstrap at start-up)."""
        if cls.select().where(cls.email == normalised_email(email)).exists():
            return
        try:
            with cls._meta.database.atomic():
                cls.new(
                    {"email": email, "name": "Administrator", "role": "admin", "password": password}
                )
        except peewee.IntegrityError:
            pass  # another worker starting at the same moment created it

    def _set(self, name: str, value) -> bool:
        # An email in another case is the same email: setting it is no change.
        return super()._set(name, normalised_email(value) if name == "email" else value)

    def save(self, *args, **kwargs):
        """Save; a change of password, email or role revokes everything the user was issued, in
        the same transaction, whoever makes it (the API, a seed, an admin's command)."""
        # Emails are unique regardless of case, so they are kept in one case.
        self.email = normalised_email(self.email)
        if self.get_id() is None:
            return super().save(*args, **kwargs)
        with self._meta.database.atomic():
            stored = User.get_for_update(self.id)
            saved = super().save(*args, **kwargs)
            credentials = ("email", "role", "password_hash")
            if any(getattr(stored, name) != getattr(self, name) for name in credentials):
                _revocation().record(self)
        return saved

    def delete_without_orders(self) -> None:
        """Delete the user, with everything they were issued revoked; Conflict while they have
        orders."""
        with self._meta.database.atomic():
            if self.orders.exists():
                raise Conflict(f"User {self.id} has orders and cannot be deleted.")
            _revocation().record(self)
            self.delete_instance()


@dataclasses.dataclass(frozen=True)
class PasswordCheck:
    """A plain password checked against the hash a user had. scrypt is slow, so a password is
    checked before the user is locked; under the lock the check holds only while the hash is
    the same."""

    password_hash: str
    matches: bool

    @classmethod
    def of(cls, user: User | None, plain: str) -> "PasswordCheck":
        if user is None:
            return cls("", False)
        return cls(user.password_hash, user.check_password(plain))

    def holds_for(self, user: User) -> bool:
        return self.matches and self.password_hash == user.password_hash


NOT_CHECKED = PasswordCheck("", False)


class CredentialsChange:
    """A change to user `user_id` (writable fields, plus `current_password`), with the rules
    for its credentials, whoever makes it (the API, an admin's command, an import):

    - a user changing their own password or email proves the current password
      (`by_the_user`), so that a stolen token cannot take the account over; anyone else
      allowed to change the user (an admin) does not;
    - a password restated unchanged (as a PUT restates it) is no change, and so revokes nothing.

    Made before the transaction, where the slow hashing is done; `apply` under the user's lock.
    """

    def __init__(self, user_id: int, changes: dict, *, by_the_user: bool):
        self.changes = changes
        fields = {k: v for k, v in changes.items() if k not in ("password", "current_password")}
        # What its version may write goes with what the client wrote (`BaseModel.replace`).
        self.fields = Written(fields, changes.writable) if isinstance(changes, Written) else fields
        self.by_the_user = by_the_user
        current = changes.get("current_password")
        new = changes.get("password")
        proves = by_the_user and current is not None and (new is not None or "email" in changes)
        # The user as stored before the lock, read once for both checks.
        stored = User.get_or_none(User.id == user_id) if proves or new is not None else None
        self._proof = PasswordCheck.of(stored, current) if proves else NOT_CHECKED
        self._restated = NOT_CHECKED
        if new is not None:
            same = proves and hmac.compare_digest(new.encode(), current.encode())
            self._restated = self._proof if same else PasswordCheck.of(stored, new)
        self._new_hash = (
            hash_password(new) if new is not None and not self._restated.matches else None
        )

    def apply(self, user: User, assign: Callable[[User, dict], bool]) -> bool:
        """Check the proof against the locked `user` (CurrentPasswordRequired), then
        `assign(user, fields)` and set the password; whether anything changed (then the caller
        saves, and the save revokes if credentials changed)."""
        if self.by_the_user and self._changes_credentials(user):
            self._prove(user)
        changed = assign(user, self.fields)
        new = self.changes.get("password")
        if new is None or self._restated.holds_for(user):
            return changed
        user.password_hash = self._new_hash or hash_password(new)
        return True

    def _changes_credentials(self, user: User) -> bool:
        email = self.changes.get("email", user.email)
        return "password" in self.changes or normalised_email(email) != user.email

    def _prove(self, user: User) -> None:
        current = self.changes.get("current_password")
        if current is None:
            raise CurrentPasswordRequired("is required")
        if self._proof.password_hash != user.password_hash:
            # Not checked yet, or the password changed since: check against the current one.
            self._proof = PasswordCheck.of(user, current)
        if not self._proof.matches:
            raise CurrentPasswordRequired("is not your current password")


def _revocation():
    # models/revocation.py refers to users: imported when a user changes, not when this loads.
    from models.revocation import Revocation

    return Revocation
