"""The database tier as production runs it (ops/patroni/patroni.yml): one etcd member and two
Patroni nodes, each running a PostgreSQL of its own on free ports in a temporary directory, the
standby synchronous; HAProxy in front finds the primary and the standby through Patroni's REST
API. For the fault suite; everything is stopped and removed after, whatever happened."""

import contextlib
import dataclasses
import os
import pathlib
import pwd
import shutil
import signal
import subprocess
import sysconfig
import tempfile
import time

import httpx
import psycopg2
import yaml

from shopapi.testing.ports import free_port
from shopapi.testing.standby import (
    DATABASE,
    Replication,
    Server,
    _as_postgres,
    _bindir,
    wait_for,
)

OPS = pathlib.Path(__file__).resolve().parents[2] / "ops"
# Generous: on a busy 2-core machine a node's first start (initdb, a base backup) is slow.
DEADLINE_SECONDS = 180
# A failover within seconds, not Patroni's half minute: the leader renews its key every second
# and is replaced after 8 silent ones (loop_wait + 2 x retry_timeout <= ttl).
TIMINGS = {"ttl": 8, "loop_wait": 1, "retry_timeout": 3}
# The tier's clients are on this machine's loopback: trusted, as the suite's other clusters are.
PG_HBA = [
    "local all all trust",
    "host replication all 127.0.0.1/32 trust",
    "host all all 127.0.0.1/32 trust",
]
# Each node's WAL volume; a fault fills it. Room for what the settings below keep and more.
WAL_VOLUME = "384m"
# Nothing here must survive the machine crashing (a process killed keeps the page cache).
FAST = {"fsync": "off", "full_page_writes": "off", "shared_buffers": "16MB", "max_connections": 80}
# Within the WAL volume: what a standby without a slot needs, what a slot may hold.
WAL_KEPT = {
    "wal_keep_size": "64MB",
    "max_slot_wal_keep_size": "128MB",
    "max_wal_size": "96MB",
    "min_wal_size": "32MB",
}
BALANCER_CONFIG = """global
    maxconn 2000
defaults
    mode tcp
    timeout connect 2s
    timeout client 1h
    timeout server 1h
    timeout check 2s
listen primary
    bind 127.0.0.1:{primary_port}
    option httpchk GET /primary
    http-check expect status 200
    default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
{primary_servers}
listen replica
    bind 127.0.0.1:{replica_port}
    option httpchk GET /replica
    http-check expect status 200
    default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
{replica_servers}
"""


def unavailable_reason() -> str | None:
    for tool, package in (("patroni", "patroni"), ("etcd", "etcd-server"), ("haproxy", "haproxy")):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (Debian's {package})"
    return None


@dataclasses.dataclass
class Node:
    """A Patroni node: its PostgreSQL (`server`), its REST API, its process."""

    name: str
    server: Server
    api_port: int
    config: pathlib.Path
    # Its WAL's own volume (a small tmpfs when run as root), which a fault can fill.
    wal_dir: pathlib.Path
    process: subprocess.Popen | None = None

    def api(self, path: str) -> int | None:
        """The status of Patroni's answer to GET `path` (/primary, /replica, /sync), or None."""
        try:
            return httpx.get(f"http://127.0.0.1:{self.api_port}{path}", timeout=2).status_code
        except httpx.HTTPError:
            return None

    def state(self) -> dict:
        try:
            return httpx.get(f"http://127.0.0.1:{self.api_port}/patroni", timeout=2).json()
        except (httpx.HTTPError, ValueError):
            return {}

    def restart_postgresql(self) -> None:
        """Its PostgreSQL restarted by Patroni, as `patronictl restart` asks; returns when done."""
        answer = httpx.post(
            f"http://127.0.0.1:{self.api_port}/restart", json={}, timeout=DEADLINE_SECONDS
        )
        answer.raise_for_status()

    def start(self) -> None:
        log = self.config.parent / f"{self.name}-patroni.log"
        # As the postgres user (PostgreSQL refuses root), without a wrapper such as runuser,
        # which would SIGKILL Patroni 2 s after passing a SIGTERM on, mid-shutdown.
        user = {"user": "postgres", "group": "postgres"} if os.geteuid() == 0 else {}
        with log.open("ab") as output:
            self.process = subprocess.Popen(
                ["patroni", str(self.config)],
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "HOME": str(self.config.parent)},
                cwd=OPS.parent,  # where its callback's module is
                **user,
            )

    def kill(self) -> None:
        """Patroni and its PostgreSQL SIGKILLed at once: the host lost."""
        postmaster = self.server.postmaster_pid() if self.server.is_running() else None
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        if postmaster is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(postmaster, signal.SIGKILL)
            # Its backends end when they find the postmaster gone.
            wait_for(
                lambda: not _pids_of(self.server.directory),
                DEADLINE_SECONDS,
                f"{self.name}'s PostgreSQL to end",
            )
        with contextlib.suppress(FileNotFoundError):
            (self.server.directory / "postmaster.pid").unlink()

    def stop(self) -> None:
        """Patroni stopped as an operator stops it (SIGTERM): it stops its PostgreSQL."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=DEADLINE_SECONDS)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_tail(self, lines: int = 30) -> str:
        log = self.config.parent / f"{self.name}-patroni.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        return "\n".join(text.splitlines()[-lines:]) + "\n" + self.server.log_tail(lines)


def _run(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True, text=True)


def _pids_of(directory: pathlib.Path) -> list[int]:
    """The processes whose command line names `directory` (a PostgreSQL's, by its -D)."""
    found = subprocess.run(["pgrep", "-f", str(directory)], capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split()]


class DatabaseTier:
    """etcd, two Patroni nodes and the HAProxy that finds their primary. `primary` and
    `standby` are whichever node holds each role now; `url` and `replica_url` reach them
    through HAProxy, as every client of the tier does."""

    def __init__(self, root: pathlib.Path):
        self.root = root
        self.etcd_port, self.etcd_peer_port = free_port(), free_port()
        self.primary_port, self.replica_port = free_port(), free_port()
        self.nodes = [self._node(f"db{n}") for n in (1, 2)]
        self.etcd: subprocess.Popen | None = None
        self.balancer: subprocess.Popen | None = None

    # -- Where clients connect

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.primary_port}/{DATABASE}"

    @property
    def replica_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.replica_port}/{DATABASE}"

    # -- Who holds which role now

    def leader(self) -> Node | None:
        holding = [node for node in self.nodes if node.api("/primary") == 200]
        return holding[0] if len(holding) == 1 else None

    @property
    def primary(self) -> Server:
        return wait_for(self.leader, DEADLINE_SECONDS, "a primary").server

    @property
    def standby(self) -> Server:
        leader = wait_for(self.leader, DEADLINE_SECONDS, "a primary")
        return next(node for node in self.nodes if node is not leader).server

    def node_of(self, server: Server) -> Node:
        return next(node for node in self.nodes if node.server is server)

    def whole(self) -> bool:
        """A primary, and the other node streaming from it as its synchronous standby."""
        leader = self.leader()
        if leader is None:
            return False
        other = next(node for node in self.nodes if node is not leader)
        return (
            other.api("/sync") == 200
            and _balanced(self.primary_port)
            and _balanced(self.replica_port)
        )

    def wait_until_whole(self) -> None:
        wait_for(
            self.whole,
            DEADLINE_SECONDS,
            "the database tier whole: a primary, its synchronous standby, HAProxy routing to both",
        )

    def replayed_everything(self) -> bool:
        """Whether the standby has replayed all the primary has written so far."""
        return Replication(self.primary, self.standby).replayed_everything()

    # -- Building and removing it

    def _node(self, name: str) -> Node:
        server = Server(self.root / name, free_port())
        wal_dir = self.root / f"{name}-wal"
        return Node(name, server, free_port(), self.root / f"{name}.yml", wal_dir)

    def _mount_wal_volume(self, node: Node) -> None:
        node.wal_dir.mkdir()
        if os.geteuid() == 0:
            _run("mount", "-t", "tmpfs", "-o", f"size={WAL_VOLUME}", "tmpfs", str(node.wal_dir))
            shutil.chown(node.wal_dir, "postgres", "postgres")
            node.wal_dir.chmod(0o700)

    def _write_config(self, node: Node) -> None:
        config = yaml.safe_load((OPS / "patroni" / "patroni.yml").read_text())
        config["scope"] = f"shopapi-{self.root.name}"
        config["name"] = node.name
        config["etcd3"] = {"hosts": f"127.0.0.1:{self.etcd_port}"}
        config["restapi"] = {
            "listen": f"127.0.0.1:{node.api_port}",
            "connect_address": f"127.0.0.1:{node.api_port}",
        }
        config["bootstrap"]["dcs"].update(TIMINGS)
        config["bootstrap"]["dcs"]["postgresql"]["parameters"].update(FAST | WAL_KEPT)
        config["bootstrap"]["pg_hba"] = PG_HBA
        config["bootstrap"]["initdb"] += ["no-sync", {"waldir": str(node.wal_dir)}]
        # The suite's hosts connect as the superuser, trusted on loopback: no app role to make.
        del config["bootstrap"]["post_bootstrap"]
        postgresql = config["postgresql"]
        postgresql.update(
            listen=f"127.0.0.1:{node.server.port}",
            connect_address=f"127.0.0.1:{node.server.port}",
            data_dir=str(node.server.directory),
            bin_dir=str(_bindir()),
            pgpass=str(self.root / f"{node.name}.pgpass"),
            authentication={
                "superuser": {"username": "postgres", "password": "postgres"},
                "replication": {"username": "postgres", "password": "postgres"},
            },
            pg_hba=PG_HBA,
            # A standby's base backup at once (a spread checkpoint takes minutes).
            basebackup=[{"checkpoint": "fast"}, "no-sync", {"waldir": str(node.wal_dir)}],
        )
        postgresql["parameters"] = {
            **postgresql.get("parameters", {}),
            "unix_socket_directories": str(self.root),
            "logging_collector": "off",
        }
        # ops' callback, with this node's address and this checkout's code and packages, run
        # by the system's Python: the tests' own may live where the postgres user cannot read.
        local = f"postgresql://postgres@127.0.0.1:{node.server.port}/{DATABASE}"
        path = f"{OPS.parent}:{sysconfig.get_paths()['purelib']}"
        postgresql["callbacks"] = {
            "on_role_change": f"env PYTHONPATH={path} /usr/bin/python3 -m models.after_promotion"
            f" --database-url {local}"
        }
        node.config.write_text(yaml.safe_dump(config))

    def _start_etcd(self) -> None:
        data = self.root / "etcd"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        client = f"http://127.0.0.1:{self.etcd_port}"
        with (self.root / "etcd.log").open("ab") as output:
            self.etcd = subprocess.Popen(
                [
                    "etcd",
                    "--name",
                    "etcd1",
                    "--data-dir",
                    str(data),
                    "--listen-client-urls",
                    client,
                    "--advertise-client-urls",
                    client,
                    "--listen-peer-urls",
                    peer,
                    "--initial-advertise-peer-urls",
                    peer,
                    "--initial-cluster",
                    f"etcd1={peer}",
                    "--initial-cluster-state",
                    "new",
                ],
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        def answers() -> bool:
            try:
                return httpx.get(f"{client}/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(answers, DEADLINE_SECONDS, "etcd to answer")

    def _start_balancer(self) -> None:
        def servers(path: str) -> str:
            return "\n".join(
                f"    server {node.name} 127.0.0.1:{node.server.port} check port {node.api_port}"
                for node in self.nodes
            )

        config = self.root / "haproxy-database.cfg"
        config.write_text(
            BALANCER_CONFIG.format(
                primary_port=self.primary_port,
                replica_port=self.replica_port,
                primary_servers=servers("/primary"),
                replica_servers=servers("/replica"),
            )
        )
        with (self.root / "haproxy.log").open("ab") as output:
            self.balancer = subprocess.Popen(
                ["haproxy", "-db", "-f", str(config)],
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def restart_node(self, node: Node, *, rebuilt: bool = False) -> None:
        """Start `node`'s Patroni again; `rebuilt`: from nothing, as a host replaced after it
        was lost (Patroni makes it a standby of the primary by a base backup)."""
        if rebuilt:
            shutil.rmtree(node.server.directory, ignore_errors=True)
            for path in node.wal_dir.iterdir():
                shutil.rmtree(path) if path.is_dir() else path.unlink()
        node.start()

    def __enter__(self) -> "DatabaseTier":
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
        try:
            self._start_etcd()
            for node in self.nodes:
                self._mount_wal_volume(node)
                self._write_config(node)
            self.nodes[0].start()
            wait_for(
                lambda: self.nodes[0].api("/primary") == 200,
                DEADLINE_SECONDS,
                "the first node to become the primary",
            )
            _as_postgres(
                _bindir() / "createdb",
                "-h",
                "127.0.0.1",
                "-p",
                self.nodes[0].server.port,
                "-U",
                "postgres",
                DATABASE,
            )
            self.nodes[1].start()
            self._start_balancer()
            self.wait_until_whole()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        for node in self.nodes:
            node.kill()
        for process in (self.balancer, self.etcd):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
        for node in self.nodes:
            if os.path.ismount(node.wal_dir):
                subprocess.run(["umount", "--lazy", str(node.wal_dir)], check=False)


def _balanced(port: int) -> bool:
    """Whether HAProxy at `port` reaches a PostgreSQL (a TCP connection it does not close)."""

    try:
        psycopg2.connect(
            host="127.0.0.1", port=port, user="postgres", dbname="postgres", connect_timeout=2
        ).close()
        return True
    except psycopg2.OperationalError:
        return False


@contextlib.contextmanager
def database_tier():
    """A DatabaseTier, up and whole; removed after."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="shopapi-patroni-"))
    try:
        with DatabaseTier(root) as tier:
            yield tier
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":  # a look by hand: python -m shopapi.testing.patroni
    started = time.monotonic()
    with database_tier() as tier:
        print(f"whole after {time.monotonic() - started:.1f} s: {tier.url}")
        print([(node.name, node.state().get("role")) for node in tier.nodes])
