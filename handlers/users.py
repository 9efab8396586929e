"""Users: customers, partners and admins. Passwords go in, never out.

Without the `admin` scope a caller reaches only its own record; any other is 404, as if absent.
"""

from connexion.exceptions import Forbidden

from models import User
from models.db import database
from shopapi import events
from shopapi.etags import if_match
from shopapi.listing import list_response
from shopapi.responses import created
from shopapi.security import current_principal


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
        events.record("user.created", user, represent, owner_id=user.id)
    return created(represent(user), user.id)


def get_user(id):
    return represent(_reachable(id))


def replace_user(id, body):
    user = _changeable(id)
    _check_role_change(body, user)
    # The role is the admin's to set: a replacement that leaves it out keeps it.
    user.replace({"role": user.role, **body})
    user.save()
    return represent(user)


def update_user(id, body):
    user = _changeable(id)
    _check_role_change(body, user)
    user.assign(body)
    user.save()
    return represent(user)


def delete_user(id):
    _changeable(id).delete_without_orders()
