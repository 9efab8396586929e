"""App instances as separate hosts: each in a network namespace of its own on a bridge, behind
HAProxy (ops/haproxy.cfg) in another namespace, all sharing the machine's PostgreSQL and Redis
through a TCP forwarder (HAProxy too) on the bridge's host side. tests/test_scale_out.py,
`make bench-hosts` and the fault suite (production_layout.py) run it; it removes everything it
made, even on failure."""

import contextlib
import csv
import io
import ipaddress
import os
import pathlib
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit, urlunsplit

import httpx

from shopapi.settings import Settings

ROOT = pathlib.Path(__file__).resolve().parents[2]
APP_PORT, BALANCER_PORT = 8000, 8080
# Generous: on a busy 2-core machine a cold start (imports, contract, database) takes seconds.
DEADLINE_SECONDS = 120
# The forwarder holds idle pooled connections as long as the app does.
FORWARDER_CONFIG = """global
    maxconn 4000
defaults
    mode tcp
    timeout connect 2s
    timeout client 1h
    timeout server 1h
listen postgresql
    bind {gateway}:5432
    server postgresql {database}
listen redis
    bind {gateway}:6379
    server redis {redis}
"""
# A port of this machine's 127.0.0.1 (a PgBouncer of a host's own) that the hosts reach on the
# gateway.
FORWARDED_PORT = """listen local{port}
    bind {gateway}:{port}
    server local{port} 127.0.0.1:{port}
"""


def balancer_config(servers: dict[str, str]) -> str:
    """ops/haproxy.cfg with a `server` line for each of `servers` (name: address:port), as an
    operator appends them."""
    lines = "".join(f"    server {name} {address}\n" for name, address in servers.items())
    return (ROOT / "ops" / "haproxy.cfg").read_text() + lines


def balancer_stats(socket_path: pathlib.Path) -> list[dict[str, str]]:
    """The rows of the balancer's `show stat` (its runtime API on `socket_path`), none while it
    is not listening yet."""
    try:
        with socket.socket(socket.AF_UNIX) as connection:
            connection.connect(str(socket_path))
            connection.sendall(b"show stat\n")
            answer = b"".join(iter(lambda: connection.recv(65536), b""))
    except OSError:
        return []
    return list(csv.DictReader(io.StringIO(answer.decode().lstrip("# "))))


def unavailable_reason() -> str | None:
    """Why hosts cannot be made here (not root, a tool missing), or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool, package in (("ip", "iproute2"), ("haproxy", "haproxy")):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (Debian's {package})"
    probe = f"shopapi-probe-{secrets.token_hex(3)}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], check=True)
    return None


def _run(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of 10.231.0.0/16 that nothing on this machine uses yet."""
    used = _run("ip", "-4", "-o", "addr", "show") + _run("ip", "-4", "route", "show")
    for third in random.sample(range(256), 256):
        if f"10.231.{third}." not in used:
            return ipaddress.ip_network(f"10.231.{third}.0/24")
    raise RuntimeError("no /24 of 10.231.0.0/16 is free")


def _moved(url: str, address: str, port: int) -> str:
    """`url` with its host and port replaced."""
    parts = urlsplit(url)
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit(parts._replace(netloc=f"{user}{address}:{port}"))


class Hosts:
    """`count` app hosts (`make serve-prod`, `workers` each) behind the balancer. `base` is the
    balancer's URL; `start`, `signal` and `wait_*` drive one host; `close` removes everything.
    `forwarded` ports of this machine's 127.0.0.1 are reached from the hosts at the same port of
    the gateway (`on_gateway(url)`); `host_env(name)`, when given, adds to one host's environment
    (a DATABASE_URL of its own, say)."""

    def __init__(
        self,
        count: int,
        database_url: str,
        redis_url: str,
        env: dict,
        work_dir: pathlib.Path,
        *,
        workers: int = 1,
        check_interval: str = "1s",
        forwarded: Sequence[int] = (),
        host_env: Callable[[str], dict] | None = None,
    ):
        self.tag = secrets.token_hex(3)
        addresses = list(_free_subnet().hosts())
        self.gateway, self.balancer_address = addresses[0], addresses[1]
        self.names = [f"app{i + 1}" for i in range(count)]
        self.addresses = addresses[10 : 10 + count]
        self.database_url, self.redis_url = database_url, redis_url
        self.env, self.work_dir, self.workers = env, work_dir, workers
        self.check_interval = check_interval
        self.forwarded, self.host_env = tuple(forwarded), host_env
        self.processes: dict[str, subprocess.Popen] = {}
        # The release each host runs: a checkout's root (this one's unless a host is given
        # another, as a rolling deploy does).
        self.releases: dict[str, pathlib.Path] = {}
        self._namespaces: list[str] = []
        self._bridge: str | None = None
        self.base = f"http://{self.balancer_address}:{BALANCER_PORT}"
        self.socket_path = work_dir / "haproxy.sock"

    def __enter__(self) -> "Hosts":
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def log(self, name: str) -> pathlib.Path:
        return self.work_dir / f"{name}.log"

    def _namespace(self, name: str) -> str:
        return f"shopapi-{self.tag}-{name}"

    def _build(self) -> None:
        self._bridge = f"sb{self.tag}"
        _run("ip", "link", "add", self._bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.gateway}/24", "dev", self._bridge)
        _run("ip", "link", "set", self._bridge, "up")
        self._host("lb", self.balancer_address)
        for name, address in zip(self.names, self.addresses, strict=True):
            self._host(name, address)
        self._spawn("forwarder", None, ["haproxy", "-db", "-f", str(self._forwarder_config())])
        for name in self.names:
            self.start(name)
        for name in self.names:
            self.wait_until_ready(name)
        self._start_balancer()
        for name in self.names:
            self.wait_for_state(name, "UP")

    def _host(self, name: str, address) -> None:
        """A namespace with one interface on the bridge, and the bridge as its way out."""
        namespace = self._namespace(name)
        _run("ip", "netns", "add", namespace)
        self._namespaces.append(namespace)
        outside, inside = f"s{self.tag}{name}", f"p{self.tag}{name}"
        _run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
        _run("ip", "link", "set", outside, "master", self._bridge, "up")
        _run("ip", "link", "set", inside, "netns", namespace)
        for command in (
            ("link", "set", inside, "name", "eth0"),
            ("addr", "add", f"{address}/24", "dev", "eth0"),
            ("link", "set", "eth0", "up"),
            ("link", "set", "lo", "up"),
            ("route", "add", "default", "via", str(self.gateway)),
        ):
            _run("ip", "-n", namespace, *command)
        # No TIME-WAIT: a closed connection's socket would keep the namespace, and so its veth
        # pair, for a minute after the test (this is a test network: no stray segments).
        _run("ip", "netns", "exec", namespace, "sysctl", "-qw", "net.ipv4.tcp_max_tw_buckets=0")

    def _forwarder_config(self) -> pathlib.Path:
        database, redis = urlsplit(self.database_url), urlsplit(self.redis_url)
        path = self.work_dir / "forwarder.cfg"
        path.write_text(
            FORWARDER_CONFIG.format(
                gateway=self.gateway,
                database=f"{database.hostname}:{database.port or 5432}",
                redis=f"{redis.hostname}:{redis.port or 6379}",
            )
            + "".join(
                FORWARDED_PORT.format(gateway=self.gateway, port=port) for port in self.forwarded
            )
        )
        return path

    def on_gateway(self, url: str) -> str:
        """`url`, a service on one of this machine's `forwarded` ports, as the hosts reach it."""
        port = urlsplit(url).port
        if port not in self.forwarded:
            raise ValueError(f"port {port} is not forwarded to the hosts")
        return _moved(url, str(self.gateway), port)

    def _spawn(
        self, name: str, namespace: str | None, command: list[str], env=None, cwd=ROOT
    ) -> None:
        prefix = ["ip", "netns", "exec", namespace] if namespace else []
        with self.log(name).open("a") as log:
            self.processes[name] = subprocess.Popen(
                [*prefix, *command],
                cwd=cwd,
                env=env or os.environ,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Its own process group: a host that dies takes every process of its server.
                start_new_session=True,
            )

    def start(self, name: str) -> None:
        """Start host `name`'s server (again); `wait_until_ready` waits for it."""
        env = {
            **os.environ,
            "BIND": f"0.0.0.0:{APP_PORT}",
            "WEB_CONCURRENCY": str(self.workers),
            "DATABASE_URL": _moved(self.database_url, self.gateway, 5432),
            "SHARED_STORE_URL": _moved(self.redis_url, self.gateway, 6379),
            "FORWARDED_ALLOW_IPS": str(self.balancer_address),
            # pg_stat_activity names the host of every connection.
            "PGAPPNAME": f"shopapi-{name}",
            **self.env,
            **(self.host_env(name) if self.host_env else {}),
        }
        # Its metrics files in the work directory, not this process's: a host SIGKILLed cannot
        # remove a directory of its own making (ops/gunicorn.conf.py), and would leave it in /tmp.
        env["PROMETHEUS_MULTIPROC_DIR"] = str(self.work_dir / f"metrics-{name}")
        release = self.releases.get(name, ROOT)
        env["PYTHONPATH"] = str(release)  # its own code first, whatever the virtualenv holds
        gunicorn = str(pathlib.Path(sys.executable).parent / "gunicorn")
        command = [gunicorn, "-c", "ops/gunicorn.conf.py", "app:create_app()"]
        self._spawn(name, self._namespace(name), command, env, cwd=release)

    def run_in(self, name: str, *command: str) -> str:
        """`command` run in host `name`'s network namespace (iptables, say); its output."""
        return _run("ip", "netns", "exec", self._namespace(name), *command)

    def address_of(self, name: str) -> str:
        return str(self.addresses[self.names.index(name)])

    def wait_until_ready(self, name: str) -> None:
        url = f"http://{self.address_of(name)}:{APP_PORT}/readyz"
        deadline = time.monotonic() + DEADLINE_SECONDS
        while True:
            try:
                if httpx.get(url, timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.processes[name].poll() is not None or time.monotonic() > deadline:
                tail = self.log(name).read_text()[-3000:]
                raise RuntimeError(f"{name} did not become ready:\n{tail}")
            time.sleep(0.1)

    def _start_balancer(self) -> None:
        config = self.work_dir / "haproxy.cfg"
        config.write_text(
            balancer_config(
                {
                    name: f"{address}:{APP_PORT}"
                    for name, address in zip(self.names, self.addresses, strict=True)
                }
            )
        )
        env = {
            **os.environ,
            "BALANCER_BIND": f"{self.balancer_address}:{BALANCER_PORT}",
            "HAPROXY_STATS_SOCKET": str(self.socket_path),
            "CHECK_INTERVAL": self.check_interval,
            **self._host_limits(),
        }
        self._spawn("balancer", self._namespace("lb"), ["haproxy", "-db", "-f", str(config)], env)

    def _host_limits(self) -> dict[str, str]:
        """What the balancer sends a host at once and keeps in line for it, as ops/haproxy.cfg
        tells an operator to set them: the host's workers times its ADMISSION_CONCURRENCY, and
        times its ADMISSION_QUEUE (HAProxy's defaults assume 2 workers, these hosts run
        `workers`). 0 is HAProxy's "no limit", as it is the app's."""
        settings = Settings.from_env({**os.environ, **self.env}, warn_of_generated_secrets=False)
        return {
            "HOST_MAXCONN": str(self.workers * settings.admission_concurrency),
            "HOST_QUEUE": str(self.workers * settings.admission_queue),
        }

    def states(self) -> dict[str, str]:
        """Each host's state as the balancer sees it: UP, DOWN, or on the way ("UP 1/2")."""
        return {
            row["svname"]: row["status"]
            for row in balancer_stats(self.socket_path)
            if row["pxname"] == "app_hosts"
        }

    def wait_for_state(self, name: str, state: str) -> None:
        deadline = time.monotonic() + DEADLINE_SECONDS
        while self.states().get(name) != state:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the balancer never saw {name} {state}: {self.states()}")
            time.sleep(0.05)

    def kill(self, name: str) -> None:
        """Host `name` dies: every process of its server at once, as in a crash. Returns once
        all are gone (the kernel resets what they had accepted)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.processes[name].pid, signal.SIGKILL)
        self.processes[name].wait()
        if name in self.names:
            namespace = self._namespace(name)
            deadline = time.monotonic() + DEADLINE_SECONDS
            while _run("ip", "netns", "pids", namespace).split():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name}'s processes outlived SIGKILL")
                time.sleep(0.01)

    def close(self) -> None:
        # The forwarder last: the hosts' connections through it close cleanly first. A socket
        # left retrying its FIN would keep its namespace, and so its veth pair, for minutes.
        for name in sorted(self.processes, key=lambda name: name == "forwarder"):
            if name == "forwarder":
                self._wait_for_namespaces_gone()
            self.kill(name)
        self._wait_for_namespaces_gone()
        if self._bridge:
            subprocess.run(["ip", "link", "del", self._bridge], capture_output=True)
            self._bridge = None

    def _wait_for_namespaces_gone(self) -> None:
        for namespace in self._namespaces:
            # Whatever still runs there (a worker its master left behind) holds it alive.
            for pid in subprocess.run(
                ["ip", "netns", "pids", namespace], capture_output=True, text=True
            ).stdout.split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        # A namespace goes once nothing holds it, with its end of each veth pair, and so the
        # pair: the machine's ends show when.
        deadline = time.monotonic() + DEADLINE_SECONDS
        while self._namespaces and time.monotonic() < deadline:
            links = _run("ip", "-o", "link", "show")
            if f"s{self.tag}" not in links.replace(f"sb{self.tag}", ""):
                break
            time.sleep(0.05)
        self._namespaces = []
