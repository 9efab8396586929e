"""A PostgreSQL primary and a hot standby of it, started from the machine's PostgreSQL binaries
on free ports in a temporary directory, for the tests of read replicas; stopped and removed
after, whatever happened."""

import contextlib
import dataclasses
import os
import pathlib
import pwd
import shutil
import subprocess
import tempfile
import time

import peewee

from models.db import postgresql_arguments
from shopapi.testing.ports import free_port

DATABASE = "shopapi"
# A cluster that starts in a second and writes little: nothing here must survive a crash.
FAST_SETTINGS = """
listen_addresses = '127.0.0.1'
fsync = off
synchronous_commit = off
full_page_writes = off
shared_buffers = 16MB
max_connections = 60
wal_level = replica
max_wal_senders = 4
hot_standby = on
# The standby reports what it replayed often, and its queries never wait for it.
wal_receiver_status_interval = 1s
max_standby_streaming_delay = 0
"""


# How often a standby's query cancelled by its replay is asked: each cancellation is one moment's
# conflict, and the next query sees a newer snapshot.
QUERY_ATTEMPTS = 10


def _bindir() -> pathlib.Path:
    return pathlib.Path(
        subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True).stdout.strip()
    )


def _as_postgres(*command, **options) -> subprocess.CompletedProcess:
    """`command` as the `postgres` user when the tests run as root (initdb refuses root)."""
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    result = subprocess.run(
        [*prefix, *map(str, command)], capture_output=True, text=True, timeout=120, **options
    )
    if result.returncode != 0:
        raise RuntimeError(f"{command[0]} failed: {result.stdout}{result.stderr}")
    return result


@dataclasses.dataclass
class Server:
    directory: pathlib.Path
    port: int

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{DATABASE}"

    @property
    def log(self) -> pathlib.Path:
        """The server's log (pg_ctl's `-l`), beside its data directory."""
        return self.directory.parent / f"{self.directory.name}.log"

    def log_tail(self, lines: int = 20) -> str:
        """The last `lines` of its log, for a failure's report ("" before it has one)."""
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def start(self) -> None:
        _as_postgres(
            _bindir() / "pg_ctl", "-D", self.directory, "-l", self.log, "-w", "-t", 60, "start"
        )

    def stop(self, mode: str = "fast") -> None:
        _as_postgres(_bindir() / "pg_ctl", "-D", self.directory, "-m", mode, "-w", "stop")

    def postmaster_pid(self) -> int:
        return int((self.directory / "postmaster.pid").read_text().split()[0])

    def is_running(self) -> bool:
        return (self.directory / "postmaster.pid").exists()

    def query(self, sql: str, params=()) -> list[tuple]:
        """`sql`'s rows, on a connection of its own (autocommit). On a standby, a query that
        its replay cancels (max_standby_streaming_delay = 0: a conflict with recovery, which
        the primary's busy counters make common) is asked again."""
        db = peewee.PostgresqlDatabase(**postgresql_arguments(self.url), connect_timeout=5)
        attempts_left = QUERY_ATTEMPTS
        while True:
            try:
                with db.connection_context():
                    return db.execute_sql(sql, params).fetchall()
            except peewee.OperationalError as error:
                attempts_left -= 1
                if "conflict with recovery" not in str(error) or not attempts_left:
                    raise


@dataclasses.dataclass
class Replication:
    primary: Server
    standby: Server

    def replayed_everything(self) -> bool:
        """Whether the standby has replayed all the primary has written so far."""
        (written,) = self.primary.query("SELECT pg_current_wal_insert_lsn()")[0]
        (caught_up,) = self.standby.query(
            "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (written,)
        )[0]
        return caught_up


def wait_for(condition, deadline_seconds: float = 60, what: str = "condition"):
    """Until `condition()` is truthy (its value), or fail after the deadline."""
    deadline = time.monotonic() + deadline_seconds
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {deadline_seconds} s: {what}")
        time.sleep(0.05)


@contextlib.contextmanager
def primary_and_standby(settings: str = ""):
    """A Replication: the primary, with the database `shopapi`, and its hot standby; both with
    `settings` (postgresql.conf lines) after the fast ones."""
    bindir = _bindir()
    root = pathlib.Path(tempfile.mkdtemp(prefix="shopapi-standby-"))
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(root, user.pw_uid, user.pw_gid)
    primary = Server(root / "primary", free_port())
    standby = Server(root / "standby", free_port())
    try:
        _as_postgres(
            bindir / "initdb",
            "-D",
            primary.directory,
            "-U",
            "postgres",
            "-A",
            "trust",
            "--no-sync",
            "-E",
            "UTF8",
        )
        with open(primary.directory / "postgresql.conf", "a") as conf:
            conf.write(f"{FAST_SETTINGS}{settings}\nport = {primary.port}\n")
            conf.write(f"unix_socket_directories = '{root}'\n")
        primary.start()
        _as_postgres(
            bindir / "createdb", "-h", "127.0.0.1", "-p", primary.port, "-U", "postgres", DATABASE
        )
        _as_postgres(
            bindir / "pg_basebackup",
            "-h",
            "127.0.0.1",
            "-p",
            primary.port,
            "-U",
            "postgres",
            "-D",
            standby.directory,
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
            "--no-sync",
        )
        with open(standby.directory / "postgresql.conf", "a") as conf:
            conf.write(f"port = {standby.port}\n")
        standby.start()
        yield Replication(primary, standby)
    finally:
        for server in (standby, primary):
            if server.is_running():
                with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                    server.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)
