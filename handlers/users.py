"""Users: customers, partners and admins. Passwords go in, never out."""

from models import User
from shopapi.listing import list_response
from shopapi.responses import created


def represent(user: User) -> dict:
    return {
        "id": user.id,
        "email": user.email,
        "name": user.name,
        "role": user.role,
        "created_at": user.created_at,
        "updated_at": user.updated_at,
    }


def list_users(**params):
    return list_response(User, User.select(), params, represent)


def create_user(body):
    user = User.new(body)
    return created(represent(user), user.id)


def get_user(id):
    return represent(User.get_by_id(id))


def replace_user(id, body):
    user = User.get_by_id(id)
    user.replace(body)
    user.save()
    return represent(user)


def update_user(id, body):
    user = User.get_by_id(id)
    user.assign(body)
    user.save()
    return represent(user)


def delete_user(id):
    User.get_by_id(id).delete_without_orders()
