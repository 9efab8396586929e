"""shopapi's production layout on this machine, for the fault suite: the database tier (a
PostgreSQL primary and its synchronous standby under Patroni, HAProxy finding the primary:
shopapi/testing/patroni.py), a PgBouncer per app host and one for the worker in front of it, a
Redis of its own, app hosts in network namespaces behind HAProxy (hosts.py), the webhook worker,
and a webhook receiver (receiver.py). Everything it starts is stopped and removed on the way out,
whatever happened."""

import collections
import contextlib
import dataclasses
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import threading
import time

from shopapi.testing.hosts import ROOT, Hosts, unavailable_reason
from shopapi.testing.patroni import DatabaseTier, database_tier
from shopapi.testing.patroni import unavailable_reason as tier_unavailable_reason
from shopapi.testing.pgbouncer import PgBouncer
from shopapi.testing.standby import DATABASE
from support.helpers import JWT_SECRET, RATE_LIMIT_SCALE
from support.receiver import Hold, Receiver, Request
from support.redis_server import RedisServer
from support.tcp_proxy import TcpProxy

# Every host signs and checks with the same secrets, as production's do.
HMAC_SECRET = "fault-suite-cursor-secret-shared-by-every-host"
# The balancer asks every 0.3 s and takes a host out after 2 failures: within the drain.
CHECK_INTERVAL, DRAIN_SECONDS = "300ms", 2
# A claim on an Idempotency-Key unanswered this long is taken over by a retry: longer than any
# request lives here (a query waits at most 10 s for PgBouncer's server connection, the app as
# long for one of its pool's; bench/results/faults.md reports the longest), and short enough
# for the suite to wait for the claims of the requests its faults cut.
IDEMPOTENCY_LEASE_SECONDS = 20
# A webhook attempt's deadline: its lease is this plus 5 s, after which a dead worker's
# delivery is sent again.
DELIVERY_TIMEOUT_SECONDS = 3


def unavailable() -> str | None:
    """Why the layout cannot be built here (not root, a tool missing), or None."""
    reason = unavailable_reason()
    if reason:
        return reason
    if shutil.which("redis-server") is None:
        return "`redis-server` is not installed (Debian's redis-server)"
    if shutil.which("pgbouncer") is None and not os.path.exists("/usr/sbin/pgbouncer"):
        return "`pgbouncer` is not installed (Debian's pgbouncer)"
    return tier_unavailable_reason()


class DeliverySwitch:
    """The receiver's answer: 200 at once; after `hold()`, each request is kept open until
    `release()`, and its event id noted in `held`. Every request's event id and time of arrival
    are in `received`; each `webhook-id` with the bodies it came with, in `bodies`."""

    def __init__(self):
        self._hold: Hold | None = None
        self._lock = threading.Lock()
        self.held: list[int] = []
        self.received: list[tuple[int, float]] = []
        self.bodies: dict[str, set[bytes]] = collections.defaultdict(set)

    def __call__(self, request: Request):
        event = request.json["id"]
        with self._lock:
            self.received.append((event, time.monotonic()))
            self.bodies[request.headers["webhook-id"]].add(request.body)
            if self._hold is None:
                return 200
            self.held.append(event)
            return self._hold

    def hold(self) -> None:
        with self._lock:
            self._hold = Hold(seconds=60)

    def release(self) -> None:
        with self._lock:
            hold, self._hold = self._hold, None
        if hold is not None:
            hold.release.set()


@dataclasses.dataclass
class Layout:
    replication: DatabaseTier
    # Each app host's PgBouncer by the host's name, and the worker's ("worker").
    bouncers: dict[str, PgBouncer]
    # Each app host's path from its PgBouncer to the primary, which a fault can slow.
    paths: dict[str, TcpProxy]
    redis: RedisServer
    hosts: Hosts
    receiver: Receiver
    deliveries: DeliverySwitch
    work_dir: pathlib.Path
    # The release the worker runs (a checkout's root); the hosts' are `hosts.releases`.
    release: pathlib.Path = ROOT
    worker: subprocess.Popen | None = None
    workers_started: int = 0
    # The host the fault under way cut off or slowed, which the others must not wait on.
    isolated_host: str | None = None
    # How the worker ended when no fault ended it (it must outlive its database's absence).
    worker_exits: list[str] = dataclasses.field(default_factory=list)

    def start_worker(self) -> None:
        """`make worker` on a host of its own, through that host's PgBouncer."""
        self.workers_started += 1
        log = self.work_dir / f"worker-{self.workers_started}.log"
        env = {
            **os.environ,
            "DATABASE_URL": self.bouncers["worker"].url(self.replication.url),
            "WEBHOOK_ALLOW_PRIVATE": "1",
            "DELIVERY_POLL_SECONDS": "0.2",
            "DELIVERY_RETRY_BASE_SECONDS": "0.2",
            "DELIVERY_TIMEOUT_SECONDS": str(DELIVERY_TIMEOUT_SECONDS),
            "PUSH_TRANSPORT": "none",
            "PYTHONPATH": str(self.release),
        }
        with log.open("ab") as output:
            self.worker = subprocess.Popen(
                [sys.executable, "-m", "shopapi.events.worker"],
                cwd=self.release,
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill_worker(self) -> None:
        if self.worker is not None and self.worker.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.worker.pid, signal.SIGKILL)
            self.worker.wait()

    def wait_until_whole(self, names=None) -> None:
        """The database tier whole, and every app host (or those `names`) serving and in the
        balancer's rotation again."""
        self.replication.wait_until_whole()
        for name in names or self.hosts.names:
            self.hosts.wait_until_ready(name)
            self.hosts.wait_for_state(name, "UP")


def migrate_to(release: pathlib.Path, database_url: str) -> str:
    """`release`'s migrations applied to `database_url`, by that release's own command, as a
    deploy runs them; what it printed."""
    done = subprocess.run(
        [sys.executable, "-m", "models.migrations"],
        cwd=release,
        env={**os.environ, "DATABASE_URL": database_url, "PYTHONPATH": str(release)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode:
        raise RuntimeError(f"migrating failed:\n{done.stdout}{done.stderr}")
    return done.stdout


@contextlib.contextmanager
def production_layout(work_dir: pathlib.Path, host_count: int = 2, release: pathlib.Path = ROOT):
    """The layout, migrated, with the worker running, every part on `release` (a checkout's
    root: this one by default): a Layout. The hosts trust the tests' tokens
    (support.helpers.bearer)."""
    deliveries = DeliverySwitch()
    with contextlib.ExitStack() as stack:
        replication = stack.enter_context(database_tier())
        migrate_to(release, replication.url)
        redis = stack.enter_context(RedisServer())
        bouncers, paths = {}, {}
        for name in [f"app{n + 1}" for n in range(host_count)] + ["worker"]:
            path = TcpProxy("127.0.0.1", replication.primary_port)
            path.start()
            stack.callback(path.stop)
            paths[name] = path
            server = f"postgresql://postgres@127.0.0.1:{path.port}/{DATABASE}"
            bouncer = PgBouncer(server, aliases={"replica": replication.replica_url})
            stack.callback(bouncer.stop)
            bouncers[name] = bouncer

        def own_bouncer(name: str) -> dict:
            bouncer = bouncers[name]
            return {
                "DATABASE_URL": hosts.on_gateway(bouncer.url(replication.url)),
                "DATABASE_REPLICA_URLS": hosts.on_gateway(bouncer.alias_url("replica")),
            }

        env = {
            "JWT_SECRET": JWT_SECRET,
            "HMAC_SECRET": HMAC_SECRET,
            "RATE_LIMIT_SCALE": str(RATE_LIMIT_SCALE),
            "DRAIN_SECONDS": str(DRAIN_SECONDS),
            "IDEMPOTENCY_LEASE_SECONDS": str(IDEMPOTENCY_LEASE_SECONDS),
            "DATABASE_POOL_SIZE": "6",
            "WEBHOOK_ALLOW_PRIVATE": "1",
        }
        hosts = Hosts(
            host_count,
            replication.url,
            redis.url,
            env,
            work_dir,
            check_interval=CHECK_INTERVAL,
            forwarded=[bouncer.port for bouncer in bouncers.values()],
            host_env=own_bouncer,
        )
        hosts.releases = dict.fromkeys(hosts.names, release)
        stack.enter_context(hosts)
        receiver = stack.enter_context(Receiver(deliveries))
        # Released before the receiver stops: a held request would keep its thread.
        stack.callback(deliveries.release)
        layout = Layout(replication, bouncers, paths, redis, hosts, receiver, deliveries, work_dir)
        stack.callback(layout.kill_worker)
        layout.start_worker()
        yield layout
