"""Every API test runs twice: on SQLite and on PostgreSQL, the latter in databases of the run's
own beside TEST_DATABASE_URL's (tests/support/run_databases.py), through PgBouncer in transaction
mode, as production runs it (shopapi/testing/pgbouncer.py).

Outside CI an unusable PostgreSQL skips its half, with one loud line at the end, and fails the run
unless ALLOW_POSTGRES_SKIP=1; a missing pgbouncer skips its own tests, with the reason shown. In
CI (CI=true) either fails, so a green CI exercised both, through PgBouncer.
"""

import collections
import functools
import hashlib
import json
import os

import anyio.from_thread
import connexion
import peewee
import pytest
from hypothesis import settings
from support.helpers import JWT_SECRET, RATE_LIMIT_SCALE, VAPID, bearer
from support.run_databases import RunDatabase, new_run_id

import models.passwords
from app import create_app
from models import MODELS
from models.db import DatabaseSetupError, open_database, use
from models.migrations import migrate
from shopapi.auth import security
from shopapi.internals import connexion as connexion_internals
from shopapi.settings import Settings
from shopapi.testing.pgbouncer import PgBouncer, PgBouncerUnavailable

POSTGRES_URL = os.environ.get("TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
# Under pytest-xdist (`make test` runs a worker per core and two more) each worker has a database
# of its own: `test_run<id>_gw0`, `test_run<id>_gw1`, ...; a run without xdist has `test_run<id>`.
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
# The run's id in its databases' names, the same in all its workers.
RUN_ID = pytest.StashKey[str]()
# How a skip of the PostgreSQL half starts; the run's end counts them.
POSTGRES_UNAVAILABLE = "PostgreSQL unavailable"

# The property-based searches' budgets: a quick default for `make test`, and the `ci` profile
# (HYPOTHESIS_PROFILE=ci, which .ci/run sets for `make test-deep`) for depth. The ci profile
# keeps Hypothesis's own for CI (derandomized, no example database); tests/test_contract.py
# sizes schemathesis by it too.
settings.register_profile("ci", settings.get_profile("ci"), max_examples=250)
settings.register_profile("dev", max_examples=40)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def _validated_once(validate):
    """connexion's check of a spec against the OpenAPI schema, done once a process for each spec:
    it is most of the second of CPU that building an app costs, and the suite builds hundreds."""
    validated = set()

    def once(cls, spec):
        digest = hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).digest()
        if digest not in validated:
            validate(cls, spec)
            validated.add(digest)

    return once


connexion_internals.wrap_own_spec_check(_validated_once)


class _OneSalt:
    """`secrets` for models/passwords.py in the test process: every salt the same one."""

    @staticmethod
    def token_bytes(length: int) -> bytes:
        return bytes(length)


# scrypt costs ~70 ms of CPU by design (models/passwords.py), and the suite creates thousands of
# users with a few passwords: in the test process one salt serves every hash, and each scrypt
# (password, salt, cost) is computed once. What is stored and checked is still scrypt's.
models.passwords.secrets = _OneSalt
models.passwords._scrypt = functools.cache(models.passwords._scrypt)


def pytest_configure(config):
    config.addinivalue_line("markers", "postgresql: the PostgreSQL half (added to its tests here)")
    workerinput = getattr(config, "workerinput", None)
    config.stash[RUN_ID] = workerinput["shopapi_run_id"] if workerinput else new_run_id()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """pytest-xdist's, in the controller: each worker's run id is the controller's."""
    node.workerinput["shopapi_run_id"] = node.config.stash[RUN_ID]


def pytest_itemcollected(item):
    # `-m "not postgresql"` (make test-quick) leaves out the PostgreSQL half.
    callspec = getattr(item, "callspec", None)
    if callspec and callspec.params.get("database_url") == "postgresql":
        item.add_marker(pytest.mark.postgresql)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    # The contract-fuzzing runs and the fault suite take minutes each: started first, they run
    # beside the rest of the suite (xdist's other workers) instead of after it.
    items.sort(key=lambda item: item.module.__name__ not in ("test_contract", "test_faults"))


# The tests skipped because PostgreSQL could not be used, by reason: a run that tested SQLite
# alone must not look green (tests/test_run_databases.py).
_POSTGRES_SKIPS: collections.Counter[str] = collections.Counter()


def _postgres_skip_allowed() -> bool:
    return os.environ.get("ALLOW_POSTGRES_SKIP") == "1"


def pytest_runtest_logreport(report):
    if report.skipped and isinstance(report.longrepr, tuple):
        reason = report.longrepr[2].removeprefix("Skipped: ")
        if reason.startswith(POSTGRES_UNAVAILABLE):
            _POSTGRES_SKIPS[reason] += 1


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter):
    # After the short test summary (its many SKIPPED lines): the last line before the counts.
    yield
    if not _POSTGRES_SKIPS:
        return
    count = sum(_POSTGRES_SKIPS.values())
    reason = _POSTGRES_SKIPS.most_common(1)[0][0]
    verdict = (
        "accepted, ALLOW_POSTGRES_SKIP=1"
        if _postgres_skip_allowed()
        else "the run fails unless ALLOW_POSTGRES_SKIP=1"
    )
    terminalreporter.write_sep(
        "!",
        f"{count} test{'s' if count > 1 else ''} skipped: {reason}; {verdict}",
        red=True,
        bold=True,
    )


def pytest_sessionfinish(session):
    failed = WORKER is None and _POSTGRES_SKIPS and not _postgres_skip_allowed()
    if failed and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def fresh_schema(url: str) -> None:
    """Drop this project's tables and migrate from nothing."""
    db = open_database(url)
    use(db)
    with db.connection_context():
        db.drop_tables(MODELS, safe=True, cascade=isinstance(db, peewee.PostgresqlDatabase))
        db.execute_sql("DROP TABLE IF EXISTS schema_migrations")
        db.execute_sql("DROP TABLE IF EXISTS table_version")
        db.execute_sql("DROP TABLE IF EXISTS sequence_advance")
    migrate(db)
    db.close_all() if hasattr(db, "close_all") else db.close()


@pytest.fixture(scope="session")
def pgbouncer():
    """A PgBouncer of this test process in front of TEST_DATABASE_URL's server, configured as
    ops/pgbouncer.ini says (transaction mode)."""
    try:
        bouncer = PgBouncer(POSTGRES_URL)
    except PgBouncerUnavailable as error:
        # CI installs pgbouncer (.ci/run), so a missing one there is a broken job, not a skip.
        if os.environ.get("CI"):
            pytest.fail(f"{error}; CI must test PostgreSQL through PgBouncer", pytrace=False)
        pytest.skip(str(error))
    yield bouncer
    bouncer.stop()


# The database each PostgreSQL URL the tests were given reaches PostgreSQL through, directly.
_DIRECT: dict[str, str] = {}


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def database_url(request, tmp_path_factory):
    """The database the tests' apps and servers use: on PostgreSQL, this process's own, through
    the suite's PgBouncer (straight to the server only outside CI without pgbouncer installed),
    dropped at the end."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('sqlite')}/shopapi.db"
        fresh_schema(url)
        yield url
        return
    own = RunDatabase(POSTGRES_URL, request.config.stash[RUN_ID], WORKER)
    try:
        direct = own.create()
    except DatabaseSetupError as error:
        reason = f"{POSTGRES_UNAVAILABLE} at {POSTGRES_URL} ({error})"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI must test PostgreSQL")
        pytest.skip(reason)
    try:
        try:
            url = request.getfixturevalue("pgbouncer").url(direct)
        except pytest.skip.Exception:
            url = direct
        _DIRECT[url] = direct
        fresh_schema(url)  # the migrations too, through PgBouncer
        yield url
    finally:
        own.drop()


@pytest.fixture(scope="session")
def direct_database_url(database_url):
    """`database_url` without PgBouncer, for what a pooler is in the way of: dropping a
    database (PgBouncer keeps its server connection to it open), and cutting the server away
    behind a PgBouncer (tests/test_pgbouncer.py)."""
    return _DIRECT.get(database_url, database_url)


@pytest.fixture(scope="session")
def served(database_url):
    """The app for one backend, checking every response against the contract, and the database
    object it is bound to. Its rate limits are far above what the suite sends (test_traffic.py
    tests them)."""
    settings = Settings(
        database_url=database_url,
        validate_responses=True,
        jwt_secret=JWT_SECRET.encode(),
        rate_limit_scale=RATE_LIMIT_SCALE,
        **VAPID,
    )
    app = create_app(settings)
    from models.db import database

    return app, database.obj


def _empty(db: peewee.Database) -> None:
    """Delete every row and start the ids over. DELETEs in one transaction, not TRUNCATE: on
    PostgreSQL that costs ~10 ms a test instead of ~170 ms (TRUNCATE replaces each table's
    files)."""
    with db.atomic():
        for model in reversed(MODELS):
            model.delete().execute()
        if isinstance(db, peewee.SqliteDatabase):
            db.execute_sql("DELETE FROM sqlite_sequence")  # the AUTOINCREMENT counters
        else:
            for model in MODELS:
                db.execute_sql(
                    "SELECT setval(pg_get_serial_sequence(%s, 'id'), 1, false)",
                    (f'"{model._meta.table_name}"',),
                )


@pytest.fixture
def app(served):
    app, db = served
    use(db)  # the other backend's app may have been built since
    _empty(db)
    # The ids start over, users' included: what the app knew of revocations would be wrong.
    security.revocations_of(app).forget()
    yield app
    db.close()


@pytest.fixture
def portal():
    """One event loop, in one thread, for the test's in-process requests: a test client without
    one starts a thread and a loop for each request, a millisecond of CPU (the app's lifespan,
    which the client's own `with` would run, is the live servers' to test)."""
    with anyio.from_thread.start_blocking_portal() as portal:
        yield portal


def _on(portal, app: connexion.FlaskApp):
    """A test client of `app` whose requests run in `portal`."""
    client = app.test_client()
    client.portal = portal
    return client


@pytest.fixture
def client(app, portal):
    """A client with an admin's credentials: most tests are about the API, not about who may
    use it (test_security.py is)."""
    client = _on(portal, app)
    client.headers.update(bearer())
    return client


@pytest.fixture
def anonymous(app, portal):
    """A client with no credentials."""
    return _on(portal, app)


@pytest.fixture
def app_with(app, served, database_url):
    """Build an app on this test's (emptied) database with some settings changed: for the
    features whose settings the shared app leaves off."""

    def build(**changes) -> "connexion.FlaskApp":
        defaults = {
            "database_url": database_url,
            "validate_responses": True,
            "jwt_secret": JWT_SECRET.encode(),
            "rate_limit_scale": RATE_LIMIT_SCALE,
            **VAPID,
        }
        return create_app(Settings(**{**defaults, **changes}))

    yield build
    use(served[1])
