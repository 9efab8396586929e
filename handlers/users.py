"""Users: customers, partners and admins. Passwords go in, never out.

Without the `admin` scope a caller reaches only its own record; any other is 404, as if absent.

Deleting a user, or changing their password, email or role, revokes every token they were
issued: the model's rule (models/user.py, models/revocation.py). Changing one's own password or
email takes the current password (`current_password`), so that a stolen token cannot take the
account over; an admin changing someone else's does not.
"""

import contextlib
import dataclasses
import hmac

import peewee
from connexion.exceptions import Forbidden, ProblemException

from models import User
from models.db import database
from models.passwords import hash_password
from models.user import normalised_email
from shopapi.auth.attempts import limited_attempt
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
    users = current_principal().only_reachable(User.select(), User.id)
    return list_response(User, users, params, represent)


def create_user(body):
    with database.atomic():
        user = User.new(body)
        outbox.record("user.created", user, represent, owner_id=user.id)
    return created(represent(user), user.id)


def get_user(id):
    return represent(_reachable(id))


def replace_user(id, body):
    # The role is the admin's to set: a replacement that leaves it out keeps it.
    return _change(id, body, lambda user, fields: user.replace({"role": user.role, **fields}))


def update_user(id, body):
    return _change(id, body, User.assign)


def delete_user(id):
    with database.atomic():
        _changeable(id).delete_without_orders()


class CurrentPasswordProblem(ProblemException):
    """403: a change of one's own password or email without the right current password."""

    def __init__(self, why: str):
        super().__init__(
            status=403,
            title="Forbidden",
            detail=f"To change your own password or email, send current_password: it {why}.",
            ext={"errors": [{"pointer": "/current_password", "detail": why}]},
        )


@dataclasses.dataclass(frozen=True)
class _Proof:
    """`current_password` checked against the password hash a user had."""

    password_hash: str
    matches: bool


def _change(id: int, body: dict, apply) -> dict:
    """Change user `id` by `apply(user, fields)`, in one transaction with the user locked: the
    checks (If-Match, role, current password) and the change (which revokes, if it changes the
    password, email or role: the model's rule). The slow part (scrypt, for the current password
    and the new one) is done before the lock is taken. A change that changes nothing saves
    nothing."""
    self_service = current_principal().user_id == id
    proof = _early_proof(id, body) if self_service else None
    restated = _restated_password(id, body, proof)
    new_hash = None
    if "password" in body and not restated.matches:
        new_hash = hash_password(body["password"])
    fields = {k: v for k, v in body.items() if k not in ("password", "current_password")}
    with database.atomic():
        user = _changeable(id)
        _check_role_change(body, user)
        if self_service and _changes_credentials(body, user):
            proof = _checked_current_password(body, user, proof)
        email_before = user.email
        changed = apply(user, fields)
        sets_password = "password" in body and not _still_the_password(restated, user)
        if sets_password:
            user.password_hash = new_hash or hash_password(body["password"])
        if changed or sets_password:
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


def _changes_credentials(body: dict, user: User) -> bool:
    return "password" in body or normalised_email(body.get("email", user.email)) != user.email


def _early_proof(id: int, body: dict) -> _Proof | None:
    """The current password checked before the transaction, when one is sent for a change of
    credentials; None otherwise."""
    if "current_password" not in body or not ("password" in body or "email" in body):
        return None
    user = User.get_or_none(User.id == id)
    if user is None:
        return None
    return _Proof(user.password_hash, user.check_password(body["current_password"]))


def _checked_current_password(body: dict, user: User, proof: _Proof | None) -> _Proof:
    """`proof` that `current_password` is the (locked) user's password; CurrentPasswordProblem
    otherwise."""
    if "current_password" not in body:
        raise CurrentPasswordProblem("is required")
    if proof is None or proof.password_hash != user.password_hash:
        # Not checked yet, or the password changed since: check against the current one.
        proof = _Proof(user.password_hash, user.check_password(body["current_password"]))
    if not proof.matches:
        raise CurrentPasswordProblem("is not your current password")
    return proof


def _restated_password(id: int, body: dict, proof: _Proof | None) -> _Proof:
    """Whether `password` is the user's current one (a PUT restates it): then it is no change.
    `current_password`'s proof answers when the two are the same; else the password is checked,
    before the transaction, as the new one would be hashed there."""
    if "password" not in body:
        return _Proof("", False)
    if proof is not None and hmac.compare_digest(
        body["password"].encode(), body["current_password"].encode()
    ):
        return proof
    user = User.get_or_none(User.id == id)
    if user is None:
        return _Proof("", False)
    return _Proof(user.password_hash, user.check_password(body["password"]))


def _still_the_password(restated: _Proof, user: User) -> bool:
    """`restated` proved the password the (locked) user still has."""
    return restated.matches and restated.password_hash == user.password_hash
