"""Who sees what: one rule for a caller (shopapi.auth.security.Principal), the owner of a
webhook, and the event feed. An admin sees everything; anyone else what belongs to the user they
act as, and what belongs to no one (the catalogue)."""

import dataclasses

import peewee

_NOTHING = peewee.SQL("1 = 0")


class Viewer:
    """Someone who sees rows by who owns them: `user_id` is the user they act as (None for
    credentials acting for no user), and `is_admin` whether they see everything."""

    user_id: int | None
    is_admin: bool

    @staticmethod
    def of(user_id: int | None, is_admin: bool) -> "Viewer":
        return _Viewer(user_id, is_admin)

    def reaches(self, owner_id: int | None) -> bool:
        """May this viewer see and change what belongs to `owner_id`?"""
        return self.is_admin or (self.user_id is not None and owner_id == self.user_id)

    def sees(self, owner_id: int | None) -> bool:
        """May this viewer see what belongs to `owner_id`, None being no one (the catalogue)?"""
        return owner_id is None or self.reaches(owner_id)

    def only_reachable(self, query: peewee.Select, owner_field) -> peewee.Select:
        """`query` narrowed to rows this viewer reaches, `owner_field` naming their user. Without
        `admin`, credentials acting for no user reach none (not the rows that have no owner)."""
        return query if self.is_admin else query.where(self._own(owner_field))

    def only_seen(self, query: peewee.Select, owner_field) -> peewee.Select:
        """`query` narrowed to rows this viewer sees: those it reaches, and those of no one."""
        if self.is_admin:
            return query
        return query.where(owner_field.is_null() | self._own(owner_field))

    def owners_reached(self) -> tuple[int, ...] | None:
        """The owners of the rows `only_reachable` leaves, for a list counted per owner
        (models/table_versions.py): everyone's (None) for an admin; else the user this viewer
        acts as, or 0, a user id no user has, for credentials acting for no user."""
        if self.is_admin:
            return None
        return (0 if self.user_id is None else self.user_id,)

    def _own(self, owner_field) -> peewee.Expression:
        return _NOTHING if self.user_id is None else owner_field == self.user_id


@dataclasses.dataclass(frozen=True)
class _Viewer(Viewer):
    user_id: int | None
    is_admin: bool
