"""A test run's own PostgreSQL database beside TEST_DATABASE_URL's: `<base>_run<id>`, or
`<base>_run<id>_gw0`, ... for pytest-xdist's workers, created when first needed and dropped at
the end, so that two runs on one server never share tables. A live run holds an advisory lock
per database; the next run drops the databases whose lock is free (a killed run's)."""

import contextlib
import re
import secrets
import zlib
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg2

from models.db import DatabaseSetupError, create_database_if_missing, error_summary

# The first key of the locks held in the base database (the app's keys live in its own).
LOCK_SPACE = 0x7E57
# Of the base database's name: room for `_run<id>_gw<n>`, and for a database a test names after
# the run's (`<run's>_<suffix>`), within PostgreSQL's 63 bytes.
PREFIX_LENGTH = 32


def new_run_id() -> str:
    return secrets.token_hex(3)


def lock_key(name: str) -> int:
    """The second key of the lock that says the database `name` is in use (an int4)."""
    return zlib.crc32(name.encode()) - 2**31


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class RunDatabase:
    """One test process's database on `base_url`'s server, as `create()` and `drop()` it."""

    def __init__(self, base_url: str, run: str, worker: str | None = None):
        self.base_url = base_url
        prefix = unquote(urlsplit(base_url).path.lstrip("/"))[:PREFIX_LENGTH]
        self.name = f"{prefix}_run{run}" + (f"_{worker}" if worker else "")
        self.url = urlunsplit(urlsplit(base_url)._replace(path=f"/{self.name}"))
        # Any run's database of this base, and the databases named after one: group 1 is the
        # run database, whose lock says whether its run is alive.
        self._family = re.compile(rf"({re.escape(prefix)}_run[0-9a-f]{{6}}(?:_gw[0-9]+)?)(?:_.+)?")
        self._owner: psycopg2.extensions.connection | None = None

    def create(self) -> str:
        """The database's URL, created (and the base database too, if missing), after dropping
        the databases of runs that ended without dropping theirs. DatabaseSetupError when
        PostgreSQL cannot be used."""
        create_database_if_missing(self.base_url, variable="TEST_DATABASE_URL")
        try:
            # The lock is held on a connection of its own for as long as this process lives.
            self._owner = psycopg2.connect(
                self.base_url, connect_timeout=3, application_name=f"tests of {self.name}"
            )
            self._owner.autocommit = True
            self._query("SELECT pg_advisory_lock(%s, %s)", LOCK_SPACE, lock_key(self.name))
            self._drop_abandoned()
            self._query(f"CREATE DATABASE {_quoted(self.name)}")
        except psycopg2.Error as error:
            self._close()
            raise DatabaseSetupError(
                f"cannot create the database {self.name!r} beside TEST_DATABASE_URL's: "
                f"{error_summary(error)}"
            ) from None
        return self.url

    def drop(self) -> None:
        """Drop the database and those named after it. FORCE: PgBouncer, or a server a test
        left running, may still hold connections to it."""
        try:
            for name, owner in self._databases():
                if owner == self.name:
                    self._query(f"DROP DATABASE IF EXISTS {_quoted(name)} WITH (FORCE)")
        finally:
            self._close()

    def _drop_abandoned(self) -> None:
        """Drop other runs' databases whose lock no one holds: their run was killed."""
        for name, owner in self._databases():
            if owner == self.name:
                continue
            if self._query("SELECT pg_try_advisory_lock(%s, %s)", LOCK_SPACE, lock_key(owner)):
                try:
                    # Another user's database may not be ours to drop; it stays.
                    with contextlib.suppress(psycopg2.errors.InsufficientPrivilege):
                        self._query(f"DROP DATABASE IF EXISTS {_quoted(name)} WITH (FORCE)")
                finally:
                    self._query("SELECT pg_advisory_unlock(%s, %s)", LOCK_SPACE, lock_key(owner))

    def _databases(self) -> list[tuple[str, str]]:
        """Each database of this base's runs, with the run database it belongs to."""
        names = [name for (name,) in self._query("SELECT datname FROM pg_database", rows=True)]
        return [(name, m[1]) for name in names if (m := self._family.fullmatch(name))]

    def _query(self, sql: str, *params, rows: bool = False):
        with self._owner.cursor() as cursor:
            cursor.execute(sql, params or None)
            if rows:
                return cursor.fetchall()
            return cursor.fetchone()[0] if cursor.description else None

    def _close(self) -> None:
        if self._owner is not None:
            self._owner.close()
            self._owner = None


@contextlib.contextmanager
def database_beside(run_url: str, suffix: str):
    """A PostgreSQL database of a test's own, empty, beside the run's (`run_url`, straight to the
    server): `<run's name>_<suffix>`, so that a run killed before dropping it drops it next time.
    Yields its URL."""
    parts = urlsplit(run_url)
    name = f"{unquote(parts.path.lstrip('/'))}_{suffix}"
    admin = psycopg2.connect(run_url, connect_timeout=3)
    admin.autocommit = True
    try:
        with admin.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {_quoted(name)} WITH (FORCE)")
            cursor.execute(f"CREATE DATABASE {_quoted(name)}")
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {_quoted(name)} WITH (FORCE)")
        admin.close()
