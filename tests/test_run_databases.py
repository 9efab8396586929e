"""A test run's PostgreSQL databases are its own: two runs at once on one server get different
ones, neither drops the other's tables, each drops its own at its end, failed or not, and the
next run drops a killed run's. An unusable PostgreSQL skips its half with one loud line, and the
run fails unless ALLOW_POSTGRES_SKIP=1. Each run here is a pytest of its own on a tiny test file,
with tests/conftest.py as its plugin."""

import contextlib
import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import psycopg2
import pytest
from support.helpers import WAIT_SECONDS, scalar, wait_for
from support.live import ROOT
from support.run_databases import LOCK_SPACE, lock_key

pytestmark = pytest.mark.slow

# A run's one test: its tables made, it says which database it has and waits to be told to go
# on; then its tables must still be there (the failure this prevents: "relation "revocation"
# does not exist", another run having dropped them). FAIL=1: it fails after that, on purpose.
HOLDS_ITS_TABLES = """
import os
import pathlib

from support.helpers import scalar, wait_for

CONTROL = pathlib.Path(os.environ["CONTROL"])
LABEL = os.environ["LABEL"]


def test_its_tables_stay(database_url, direct_database_url):
    (CONTROL / f"{LABEL}.ready").write_text(direct_database_url.rpartition("/")[2])
    wait_for((CONTROL / f"{LABEL}.go").exists, "the word to go on")
    assert scalar(direct_database_url, "SELECT count(*) FROM revocation") == 0
    assert os.environ.get("FAIL") != "1", "failing on purpose"
"""

NEEDS_A_DATABASE = """
def test_needs_a_database(database_url):
    pass
"""


def _environment(tmp_path: pathlib.Path, test_database_url: str, **changes) -> dict:
    """This process's environment for a pytest of its own: none of this run's xdist worker
    (or CI) settings, tests/ importable as pytest makes it, temporary files under tmp_path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k != "CI"}
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return {
        **env,
        "PYTHONPATH": str(ROOT / "tests"),
        "TEST_DATABASE_URL": test_database_url,
        "TMPDIR": str(tmp_path / "tmp"),
        **changes,
    }


def _pytest(tmp_path: pathlib.Path, source: str, *options: str) -> list[str]:
    """The command line of a pytest run of `source` in tmp_path, tests/conftest.py its plugin."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_one.py").write_text(textwrap.dedent(source))
    return [sys.executable, "-m", "pytest", "-p", "conftest", "-q", *options, "test_one.py"]


class Run:
    """A pytest run of HOLDS_ITS_TABLES on the PostgreSQL half, in a process group of its own
    (its PgBouncer with it), its output in a file."""

    def __init__(self, tmp_path, base_url: str, label: str, *options: str, **env):
        self.directory = tmp_path / label
        self.directory.mkdir()
        self.control = tmp_path / "control"
        self.control.mkdir(exist_ok=True)
        self.label = label
        self.output = self.directory / "output.txt"
        command = _pytest(self.directory, HOLDS_ITS_TABLES, "-k", "postgresql", *options)
        environment = _environment(
            self.directory, base_url, CONTROL=str(self.control), LABEL=label, **env
        )
        with open(self.output, "wb") as output:
            self.process = subprocess.Popen(
                command,
                cwd=self.directory,
                env=environment,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def database(self) -> str:
        """The database the run's test has, once it has it."""
        ready = self.control / f"{self.label}.ready"

        def told():
            assert self.process.poll() is None, f"{self.label} ended:\n{self.text()}"
            return ready.exists() and ready.read_text()

        return wait_for(told, f"run {self.label}'s database")

    def go_on(self) -> int:
        """Let its test finish; the run's exit status."""
        (self.control / f"{self.label}.go").touch()
        return self.process.wait(timeout=WAIT_SECONDS)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=WAIT_SECONDS)

    def text(self) -> str:
        return self.output.read_text(errors="replace")


def _databases(server_url: str) -> set[str]:
    names = scalar(server_url, "SELECT array_agg(datname::text) FROM pg_database")
    return set(names)


def _runs_base(direct_database_url: str) -> str:
    """A TEST_DATABASE_URL for the runs here, on this run's server: a database that does not
    exist yet, named after this run's own (so this run drops it, and theirs, at its end)."""
    return f"{direct_database_url}_runs"


@pytest.fixture
def runs():
    """The runs a test starts, killed if still running at its end."""
    started: list[Run] = []
    yield started
    for run in started:
        if run.process.poll() is None:
            run.kill()


def test_two_runs_at_once_keep_their_own_databases(
    database_url, direct_database_url, tmp_path, runs
):
    if not database_url.startswith("postgresql"):
        pytest.skip("runs on PostgreSQL")
    base = _runs_base(direct_database_url)
    # As two checkouts' `make test` do: each with xdist workers (both had test_gw0 before).
    first = Run(tmp_path, base, "first", "-n", "1")
    second = Run(tmp_path, base, "second", "-n", "1", FAIL="1")
    runs.extend([first, second])
    mine, theirs = first.database(), second.database()
    assert mine != theirs
    assert {mine, theirs} <= _databases(direct_database_url)

    # The second ends first, failed: its database goes, the first's and its tables stay.
    assert second.go_on() == 1, second.text()
    assert "failing on purpose" in second.text()
    assert theirs not in _databases(direct_database_url)
    assert mine in _databases(direct_database_url)
    assert first.go_on() == 0, first.text()
    assert mine not in _databases(direct_database_url)


def _owner_alive(server_url: str, name: str) -> bool:
    """Whether a run holds the lock that says the database `name` is in use."""
    with contextlib.closing(psycopg2.connect(server_url)) as connection:
        cursor = connection.cursor()
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND classid = %s AND objid = %s AND objsubid = 2",
            (LOCK_SPACE % 2**32, lock_key(name) % 2**32),
        )
        return cursor.fetchone()[0] > 0


def test_the_next_run_drops_a_killed_runs_database(
    database_url, direct_database_url, tmp_path, runs
):
    if not database_url.startswith("postgresql"):
        pytest.skip("runs on PostgreSQL")
    base = _runs_base(direct_database_url)
    killed = Run(tmp_path, base, "killed")
    runs.append(killed)
    orphan = killed.database()
    killed.kill()
    # Its lock goes with its connection, once the server has seen that close.
    wait_for(lambda: not _owner_alive(direct_database_url, orphan), "the killed run's lock")
    assert orphan in _databases(direct_database_url)

    (tmp_path / "control" / "next.go").touch()
    following = Run(tmp_path, base, "next")
    runs.append(following)
    assert following.process.wait(timeout=WAIT_SECONDS) == 0, following.text()
    assert orphan not in _databases(direct_database_url)


# As `make test` runs (xdist), and without xdist, with the skip accepted.
@pytest.mark.parametrize(
    ("options", "allowed", "status"),
    [(["-n", "1"], {}, 1), ([], {"ALLOW_POSTGRES_SKIP": "1"}, 0)],
)
def test_a_skipped_postgresql_half_is_one_loud_line(tmp_path, options, allowed, status):
    unreachable = "postgresql://postgres@127.0.0.1:1/nothing-listens-here"
    run = subprocess.run(
        _pytest(tmp_path, NEEDS_A_DATABASE, "-p", "no:cacheprovider", "-ra", *options),
        cwd=tmp_path,
        env=_environment(tmp_path, unreachable, **allowed),
        capture_output=True,
        text=True,
        timeout=WAIT_SECONDS,
    )
    assert run.returncode == status, run.stdout + run.stderr
    assert "1 passed, 1 skipped" in run.stdout
    lines = run.stdout.splitlines()
    loud = [line for line in lines if line.startswith("!")]
    assert len(loud) == 1, run.stdout
    assert lines.index(loud[0]) == len(lines) - 2, "the last line before the counts"
    assert "1 test skipped: PostgreSQL unavailable" in loud[0]
    assert "127.0.0.1:1/nothing-listens-here" in loud[0]
    assert "ALLOW_POSTGRES_SKIP=1" in loud[0]
