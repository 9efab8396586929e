"""The demo accounts: users whose passwords are published (in the README), to try the service
with. They belong only in the demo database — the SQLite file that `make run` creates when
DATABASE_URL is not set — or where SEED_DEMO=1 asks for them (`make seed-demo`); and the demo
admin only where the operator names no admin of their own (ADMIN_EMAIL). models/seed.py
creates them with the rest of the demo data.

While any account still has a published password, the service says so at start-up: one warning
(one JSON line) naming the accounts, never the passwords.
"""

import logging

import peewee

from models.db import database
from models.user import User, normalised_email

log = logging.getLogger("shopapi.demo")

ADMIN = {
    "email": "admin@example.com",
    "name": "Ada Admin",
    "role": "admin",
    "password": "admin-pass",
}
CUSTOMER = {"email": "carol@example.com", "name": "Carol Customer", "password": "carol-pass"}
PARTNER = {
    "email": "paul@example.com",
    "name": "Paul Partner",
    "role": "partner",
    "password": "paul-pass",
}
ACCOUNTS = (ADMIN, CUSTOMER, PARTNER)
PUBLISHED_PASSWORDS = frozenset(account["password"] for account in ACCOUNTS)


def published_passwords_in_use(admin_email: str | None = None, admin_password: str | None = None):
    """The emails of the accounts that can be logged in to with a published password: each demo
    account that exists and still has its own (one scrypt check each, ~50 ms), and the
    operator's admin if ADMIN_PASSWORD is a published one and still the account's."""
    suspects = {account["email"]: account["password"] for account in ACCOUNTS}
    if admin_email and admin_password in PUBLISHED_PASSWORDS:
        suspects[normalised_email(admin_email)] = admin_password
    with database.connection_context():
        users = User.select().where(User.email.in_(list(suspects))).order_by(User.id)
        return [user.email for user in users if user.check_password(suspects[user.email])]


def warn_of_published_passwords(settings) -> list[str]:
    """At start-up: one warning if any account still has a published password; those emails."""
    try:
        in_use = published_passwords_in_use(settings.admin_email, settings.admin_password)
    except (peewee.DatabaseError, peewee.InterfaceError) as error:
        # The service starts without its database (and answers 503 until it is back), or
        # before it is migrated.
        log.warning("could not check for published passwords: %s", error)
        return []
    if in_use:
        log.warning(
            "accounts with published passwords: %s. Anyone who has read the README can log in "
            "as them: fine for the demo database, not for anything else. Change their passwords "
            "or delete them; set your own admin with ADMIN_EMAIL and ADMIN_PASSWORD.",
            ", ".join(in_use),
            extra={"fields": {"event": "published_passwords", "accounts": in_use}},
        )
    return in_use
