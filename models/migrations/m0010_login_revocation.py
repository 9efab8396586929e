"""A revocation may end one login rather than every token of a user: `family` names the login
(the refresh tokens' family, which its access tokens carry as `sid`). Rows without it are the
user's revocations, as before (see models/revocation.py)."""

import peewee


def up(db: peewee.Database) -> None:
    db.execute_sql('ALTER TABLE "revocation" ADD COLUMN family VARCHAR(32)')
