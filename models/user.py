import peewee

from models.base import BaseModel
from models.errors import Conflict
from models.passwords import hash_password, verify_password

ROLES = ("customer", "partner", "admin")


class User(BaseModel):
    email = peewee.CharField(max_length=254, unique=True)
    name = peewee.CharField(max_length=200)
    role = peewee.CharField(max_length=16, default="customer")
    password_hash = peewee.CharField(max_length=200)

    writable = ("email", "name", "role", "password")

    @property
    def password(self):
        raise AttributeError("a password is write-only; use check_password()")

    @password.setter
    def password(self, plain: str) -> None:
        self.password_hash = hash_password(plain)

    def check_password(self, plain: str) -> bool:
        return verify_password(plain, self.password_hash)

    def save(self, *args, **kwargs):
        # Emails are unique regardless of case, so they are kept in one case.
        self.email = self.email.lower()
        return super().save(*args, **kwargs)

    def delete_without_orders(self) -> None:
        if self.orders.exists():
            raise Conflict(f"User {self.id} has orders and cannot be deleted.")
        self.delete_instance()
