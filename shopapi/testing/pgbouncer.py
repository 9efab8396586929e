"""Debian's pgbouncer in transaction mode, started from ops/pgbouncer.ini in front of a
PostgreSQL server: for the test suite's PostgreSQL half and for the bench (bench/load.py)."""

import os
import pathlib
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg2

from shopapi.testing.ports import free_port

OPS_CONFIG = pathlib.Path(__file__).resolve().parents[2] / "ops" / "pgbouncer.ini"
STARTUP_DEADLINE_SECONDS = 60
# What a test or bench instance changes in ops/pgbouncer.ini: where it listens (a free port, no
# Unix socket), its files (in its own directory; the log on stderr, into that directory), and
# clients trusted (it listens on 127.0.0.1 only). Everything else, the pool above all, is ops'.
_REPLACED = ("listen_addr", "listen_port", "unix_socket_dir", "logfile", "pidfile")
_REPLACED += ("auth_type", "auth_file", "admin_users", "stats_users")


class PgBouncerUnavailable(Exception):
    """pgbouncer is not installed, or did not start; the message says which."""


def _quoted(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


class PgBouncer:
    """One pgbouncer process for the PostgreSQL server of `server_url` (any of its databases,
    by name); `url(database_url)` is that database through it. `aliases` name databases of other
    servers (a replica's), each reached as `alias_url(name)`. The server's user logs in with
    the URL's password; `settings` change lines of ops/pgbouncer.ini's [pgbouncer] section."""

    def __init__(self, server_url: str, aliases: dict[str, str] | None = None, **settings):
        self.executable = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not os.path.exists(self.executable):
            raise PgBouncerUnavailable(
                "pgbouncer is not installed (Debian: apt-get install pgbouncer)"
            )
        parts = urlsplit(server_url)
        self.user = unquote(parts.username) if parts.username else pwd.getpwuid(os.getuid())[0]
        self.port = free_port()
        self.directory = pathlib.Path(tempfile.mkdtemp(prefix="pgbouncer-"))
        password = unquote(parts.password) if parts.password else ""
        (self.directory / "userlist.txt").write_text(f"{_quoted(self.user)} {_quoted(password)}\n")
        self.aliases = dict(aliases or {})
        (self.directory / "pgbouncer.ini").write_text(self._config(_server(parts), settings))
        self.log = self.directory / "pgbouncer.log"
        self.process = self._start()

    def _config(self, server: str, settings: dict) -> str:
        ops = _pgbouncer_section(OPS_CONFIG.read_text())
        mine = {
            "listen_addr": "127.0.0.1",
            "listen_port": str(self.port),
            "unix_socket_dir": "",
            "auth_type": "trust",
            "auth_file": str(self.directory / "userlist.txt"),
            "admin_users": self.user,
            "stats_users": self.user,
        }
        lines = [f"{key} = {value}" for key, value in ops.items() if key not in _REPLACED]
        lines += [f"{key} = {value}" for key, value in {**mine, **settings}.items()]
        databases = [
            f"{name} = {_server(urlsplit(url))} dbname={urlsplit(url).path.lstrip('/')}"
            for name, url in self.aliases.items()
        ]
        # `*`: every other database of the server, by the name the client asks for.
        databases.append(f"* = {server}")
        return (
            "[databases]\n" + "\n".join(databases) + "\n\n[pgbouncer]\n" + "\n".join(lines) + "\n"
        )

    def _start(self) -> subprocess.Popen:
        argv = [self.executable, str(self.directory / "pgbouncer.ini")]
        if os.geteuid() == 0:  # pgbouncer refuses to run as root
            runner = "postgres" if _user_exists("postgres") else "nobody"
            shutil.chown(self.directory, runner)
            for path in self.directory.iterdir():
                shutil.chown(path, runner)
            argv += ["-u", runner]
        # In the starter's process group: whatever stops the test run or the bench as a group
        # stops pgbouncer too, even when the starter has no chance to.
        with open(self.log, "ab") as log:
            process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + STARTUP_DEADLINE_SECONDS
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=5).close()
                return process
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    self._stop(process)
                    raise PgBouncerUnavailable(
                        f"pgbouncer did not start:\n{self.log.read_text()[-2000:]}"
                    ) from None
                time.sleep(0.05)

    def url(self, database_url: str) -> str:
        """`database_url` (a database of this server) through this pgbouncer."""
        parts = urlsplit(database_url)
        credentials = parts.netloc.rpartition("@")[0]
        netloc = f"{credentials}@127.0.0.1:{self.port}" if credentials else f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    def alias_url(self, name: str) -> str:
        """The database `aliases` named `name`, through this pgbouncer, as the server's user."""
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{name}"

    def admin_url(self) -> str:
        """The admin console (SHOW POOLS, SHOW STATS, ...), as the server's user."""
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/pgbouncer"

    def show(self, what: str) -> list[dict]:
        """The rows of the admin console's `SHOW <what>` (POOLS, STATS, CONFIG, ...)."""
        connection = psycopg2.connect(self.admin_url())
        connection.autocommit = True  # the console runs no transactions
        try:
            with connection.cursor() as cursor:
                cursor.execute(f"SHOW {what}")
                names = [column.name for column in cursor.description]
                return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        finally:
            connection.close()

    @property
    def pid(self) -> int:
        return self.process.pid

    def kill(self) -> None:
        """pgbouncer SIGKILLed, as by the kernel's OOM killer: its connections cut unanswered."""
        self.process.kill()
        self.process.wait()

    def restart(self) -> None:
        """Start it again, on the same port with the same configuration."""
        self.process = self._start()

    def stop(self) -> None:
        """Stop pgbouncer (its clients are disconnected) and remove its directory."""
        self._stop(self.process)
        shutil.rmtree(self.directory, ignore_errors=True)

    @staticmethod
    def _stop(process: subprocess.Popen) -> None:
        if process.poll() is None:
            process.terminate()  # SIGTERM: immediate shutdown
            process.wait(timeout=30)


def _server(parts) -> str:
    """A [databases] entry's server, from a split PostgreSQL URL."""
    return f"host={parts.hostname or '127.0.0.1'} port={parts.port or 5432}"


def _pgbouncer_section(text: str) -> dict[str, str]:
    """The `key = value` lines of an ini file's [pgbouncer] section, comments left out."""
    section, settings = None, {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in ";#":
            continue
        if line.startswith("["):
            section = line.strip("[]").strip()
        elif section == "pgbouncer":
            key, _, value = line.partition("=")
            settings[key.strip()] = value.strip()
    return settings


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
