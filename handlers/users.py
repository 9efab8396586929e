"""Users: customers, partners and admins. Passwords go in, never out.

Without the `admin` scope a caller reaches only its own record; any other is 404, as if absent.

Deleting a user, or changing their password, email or role, revokes every token they were
issued; changing one's own password or email takes the current password (`current_password`).
Both are the model's rules (models/user.py), kept by any path that changes a user.
"""

import contextlib

import peewee
from connexion.exceptions import Forbidden

from models import User
from models.db import database
from models.user import CredentialsChange, normalised_email
from shopapi.auth.credential_attempts import limited_attempt
from shopapi.auth.security import current_principal
from shopapi.events import outbox
from shopapi.web.etags import if_match
from shopapi.web.listing import list_response
from shopapi.web.responses import created


def represent(user: User) -> dict:
    return {
        "id": user.id,
        "email": user.email,
        "name": user.name,
        "role": user.role,
        "created_at": user.created_at,
        "updated_at": user.updated_at,
    }


def _reachable(id: int, load=User.get_by_id) -> User:
    if not current_principal().reaches(id):
        raise User.DoesNotExist
    return load(id)


def _changeable(id: int) -> User:
    """The user, if reachable, locked for a change that the request's If-Match allows."""
    return if_match(_reachable(id, User.get_for_update), represent)


def _check_role_change(body: dict, user: User) -> None:
    if body.get("role", user.role) != user.role and not current_principal().is_admin:
        raise Forbidden("Only an admin sets a user's role.")


def list_users(**params):
    principal = current_principal()
    users = principal.only_reachable(User.select(), User.id)
    # Without admin, only themself: their list's tag moves with their own record alone.
    return list_response(User, users, params, represent, owners=principal.owners_reached())


def create_user(body):
    with database.atomic():
        user = User.new(body)
        outbox.record("user.created", user, represent, owner_id=user.id)
    return created(represent(user), user.id)


def get_user(id):
    return represent(_reachable(id))


def replace_user(id, body):
    # The role is the admin's to set: a replacement that leaves it out keeps it.
    return _change(id, body, lambda user, fields: user.replace(fields.keeping("role")))


def update_user(id, body):
    return _change(id, body, User.assign)


def delete_user(id):
    with database.atomic():
        _changeable(id).delete_without_orders()


def _change(id: int, body: dict, assign) -> dict:
    """Change user `id` by `assign(user, fields)`, in one transaction with the user locked: the
    checks (If-Match, role, and the model's credential rules) and the change (which revokes, if
    it changes the password, email or role). The slow part (scrypt, for the current password
    and the new one) is done before the lock is taken. A change that changes nothing saves
    nothing."""
    change = CredentialsChange(id, body, by_the_user=current_principal().user_id == id)
    with database.atomic():
        user = _changeable(id)
        _check_role_change(body, user)
        email_before = user.email
        if change.apply(user, assign):
            with _limited_if_email_taken(user, email_before):
                user.save()
    return represent(user)


@contextlib.contextmanager
def _limited_if_email_taken(user: User, email_before: str):
    """A taken email is 409, which tells that someone has that email. Without `admin`, a user
    runs into that only a few times a day (the spec's x-rate-limit-email-taken-per-user): each
    change of email is counted before it is saved and the count given back unless it was
    taken; over the limit, 429 and no change. Admins, who may list every user, are not
    counted."""
    if current_principal().is_admin or normalised_email(user.email) == email_before:
        yield
        return
    with limited_attempt(f"user:{user.id}") as attempt:
        try:
            yield
        except peewee.IntegrityError:
            attempt.failed()
            raise
