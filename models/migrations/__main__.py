"""`python -m models.migrations` (`make migrate`): bring the database DATABASE_URL names up to
date, creating a PostgreSQL database that does not exist yet when its user may. With `--check`,
change nothing: exit 0 when no migration is pending, else 1 naming them (the image's server and
worker wait on it). A configuration mistake is one line on stderr and exit status 1, not a
traceback."""

import argparse
import sys

import peewee

from models.bounds import Bounds
from models.db import (
    DatabaseSetupError,
    create_database_if_missing,
    error_summary,
    open_database,
)
from models.migrations import migrate, pending
from shopapi.settings import ConfigurationError, Settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m models.migrations", description=__doc__)
    parser.add_argument(
        "--check", action="store_true", help="migrate nothing; exit 1 if any migration is pending"
    )
    args = parser.parse_args(argv)
    try:
        # Migrating signs nothing: the generated secrets are the server's to warn of.
        settings = Settings.from_env(warn_of_generated_secrets=False)
        db = open_database(settings.database_url, bounds=Bounds.configured(settings))
        if args.check:
            with db.connection_context():
                waiting = pending(db)
        else:
            if settings.database_url.startswith("postgres") and create_database_if_missing(
                settings.database_url
            ):
                print("created the database DATABASE_URL names")
            applied = migrate(db)
    except (ConfigurationError, DatabaseSetupError) as error:
        print(f"shopapi: {error}", file=sys.stderr)
        return 1
    except peewee.OperationalError as error:
        print(f"shopapi: cannot use DATABASE_URL: {error_summary(error)}", file=sys.stderr)
        return 1
    if args.check:
        if waiting:
            print(f"migrations pending: {', '.join(waiting)}", file=sys.stderr)
            return 1
        print("migrations: none pending (up to date)")
        return 0
    print(f"migrations applied: {', '.join(applied) or 'none (up to date)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
