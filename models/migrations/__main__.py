"""`python -m models.migrations` (`make migrate`): bring the database DATABASE_URL names up to
date, creating a PostgreSQL database that does not exist yet when its user may. A configuration
mistake is one line on stderr and exit status 1, not a traceback."""

import sys

import peewee

from models.bounds import Bounds
from models.db import (
    DatabaseSetupError,
    create_database_if_missing,
    error_summary,
    open_database,
)
from models.migrations import migrate
from shopapi.settings import ConfigurationError, Settings


def main() -> int:
    try:
        # Migrating signs nothing: the generated secrets are the server's to warn of.
        settings = Settings.from_env(warn_of_generated_secrets=False)
        if settings.database_url.startswith("postgres") and create_database_if_missing(
            settings.database_url
        ):
            print("created the database DATABASE_URL names")
        applied = migrate(open_database(settings.database_url, bounds=Bounds.configured(settings)))
    except (ConfigurationError, DatabaseSetupError) as error:
        print(f"shopapi: {error}", file=sys.stderr)
        return 1
    except peewee.OperationalError as error:
        print(f"shopapi: cannot use DATABASE_URL: {error_summary(error)}", file=sys.stderr)
        return 1
    print(f"migrations applied: {', '.join(applied) or 'none (up to date)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
