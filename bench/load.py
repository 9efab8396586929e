"""The load benchmark (`make bench`): shopapi's production server under wrk, on the seeded data set
in a PostgreSQL primary with one hot standby taking shopapi's reads, against a plain Flask +
Peewee baseline and the stack's floor measured in the same run, on the same primary. The report
opens with issue 32's goals (goals()), each measured, met or not.

1. list: the mix's list query (`category` filter, `-price_cents` sort, v1's exact count),
   baseline, the stack's floor (the baseline's function on a bare Connexion FlaskApp under
   uvicorn, bench/floor_app.py), shopapi, and `conditional`: shopapi's list revalidated with
   If-None-Match by clients holding a current copy, every answer a 304 (nothing writes in this
   phase), its database statements counted by pg_stat_statements; interleaved rounds under the
   same load; CPU per request and the ratios.
2. mix: list products 40 %, get a product 30 %, list my orders 15 %, place an order 10 %,
   patch a product 5 % (bench/mix.lua), each client with its own valid token, in rounds
   interleaved with `mix_v3`, the same mix as a v3 client sends it (v3's paths, no count, money
   as an object); then each operation alone in both versions, for its own cost (reads and
   writes size the database differently).
3. steps: the mix at a constant offered rate, stepped up past saturation: latency percentiles
   against offered load (plotted), p50 at 0.2 of saturation beside p99 at 0.7.
4. scale-out: one instance against two (separate servers on separate ports, as if on two hosts,
   each with its PgBouncer, sharing the primary, the standby and Redis, round-robin from the load
   generator); then checks that the data, the rate limits and the standby stayed consistent.

The primary and the standby are the bench's own clusters (shopapi/testing/standby.py), seeded at
each run. Every shopapi server reaches them through a PgBouncer of its own in transaction mode
(ops/pgbouncer.ini), as a production host does: the primary as `shopapi`, the standby as the
entry `shopapi_replica` (DATABASE_REPLICA_URLS). The baseline, the plain stack, connects
directly to the primary.

CPU is read from /proc: the server's processes (master and workers), the primary's processes
and the standby's (each cluster's postmaster and its children), and PgBouncer, separately.
Results go to bench/results/load.{json,md,png}; BENCH_QUICK=1 runs one short round of each
phase, to try the script, into load-quick.{json,md,png} (not a measurement).

    python bench/load.py
"""

import atexit
import contextlib
import http.client
import json
import os
import pathlib
import platform
import re
import resource
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import psycopg2
from peewee import fn

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import cpu, plot  # noqa: E402
from bench.seed import PRODUCTS, URL, seed  # noqa: E402
from models import Order, OrderItem, Product, User  # noqa: E402
from models.db import database  # noqa: E402
from models.event import Event  # noqa: E402
from models.user import ROLE_SCOPES  # noqa: E402
from shopapi.auth.tokens import AccessTokens  # noqa: E402
from shopapi.settings import Settings  # noqa: E402
from shopapi.testing.pgbouncer import PgBouncer  # noqa: E402
from shopapi.testing.standby import primary_and_standby, wait_for  # noqa: E402

RESULTS = ROOT / "bench" / "results"
BIN = pathlib.Path(sys.executable).parent
REDIS = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
SHOPAPI_PORT, BASELINE_PORT, SCALE_OUT_PORTS, FLOOR_PORT = 8200, 8201, (8202, 8203), 8204
# The load: connections kept open by wrk's two threads, seconds per measured round. A closed
# loop keeps that many requests at the server: no more than one worker runs and queues
# (ADMISSION_CONCURRENCY 2 + ADMISSION_QUEUE 8), which would refuse the rest, however the
# connections fall on the workers (16 on two workers were refused whenever 13 fell on one).
CONNECTIONS, THREADS = 10, 2
ROUNDS, ROUND_SECONDS, WARM_UP_SECONDS = 3, 10, 3
OPERATION_SECONDS, STEP_SECONDS = 5, 6
# BENCH_QUICK=1: one short round of everything, to try the script; its numbers mean nothing.
QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")
if QUICK:
    ROUNDS, ROUND_SECONDS, WARM_UP_SECONDS = 1, 3, 1
    OPERATION_SECONDS, STEP_SECONDS = 2, 2
# bench/mix.lua's names, each alone; `*_v3` is the operation as a v3 client sends it (`list_v3`:
# the list uncounted, measured beside v1's exact count).
OPERATIONS = ("list", "list_v3", "get", "get_v3", "orders", "orders_v3")
OPERATIONS += ("create", "create_v3", "patch", "patch_v3")
# `conditional`: each of these users holds the list's page of each category, with its ETag.
REVALIDATING_USERS = 100
# Any other answer to `conditional` is an error: the page did not change.
EXPECTED_STATUSES = {"conditional": {304}}
# Of mix_v3's saturated rate (2xx a second); the goals read p50 at LOW, p99 at HIGH and the
# answers at OVERLOAD, each step OVERLOAD_SECONDS past saturation.
STEP_FRACTIONS = (0.2, 0.5, 0.7, 0.9, 1.0, 1.5, 2.0)
LOW, HIGH, OVERLOAD = 0.2, 0.7, 2.0
OVERLOAD_SECONDS = 20
# The constant-rate runs' connections: OPEN_SECONDS of the rate offered (so that it holds while
# answers take up to that long), within OPEN_CONNECTIONS; no fewer than CONNECTIONS. Not many
# more: a connection idle past the server's keep-alive (5 s) is closed, which wrk counts as an
# error.
OPEN_SECONDS, OPEN_CONNECTIONS = 2, 512


def open_connections(rate: float) -> int:
    return max(CONNECTIONS, min(OPEN_CONNECTIONS, round(rate * OPEN_SECONDS)))


# The list's tail is read at this fraction of each server's own saturated rate.
LIST_TAIL_FRACTION = 0.7
# wrk stops with requests under way; the servers finish them within this, before the database is
# read for the consistency checks (an order committing meanwhile would be half counted).
SETTLE_SECONDS = 2
PARTNERS = 100  # tokens that may patch products; every seeded user is a customer
CATEGORIES = ("books", "kitchen", "garden", "toys")


# The bench's clusters, whose CPU each run reads apart (main() starts them): their postmasters.
# Empty (the other benches, on BENCH_DATABASE_URL): every postgres process on the machine.
CLUSTERS: dict = {}
# The clusters' settings, after the test clusters' fast ones (shopapi/testing/standby.py): the
# data set (about 100 MB) in memory, room for the scale-out's PgBouncers, and a standby whose
# reads never stop the primary's vacuum from cleaning up (else they are cancelled, or replay
# waits). DURABLE are production's, set once the seed is in.
CLUSTER_SETTINGS = "shared_buffers = 128MB\nmax_connections = 150\nhot_standby_feedback = on\n"
# pg_stat_statements counts the conditional phase's statements on each cluster, and only those:
# off (no query ids either) elsewhere, so that it costs the other phases nothing.
CLUSTER_SETTINGS += "shared_preload_libraries = 'pg_stat_statements'\n"
CLUSTER_SETTINGS += "compute_query_id = off\npg_stat_statements.track = none\n"
STATEMENTS_COUNTED = {
    True: {"compute_query_id": "on", "pg_stat_statements.track": "top"},
    False: {"compute_query_id": "off", "pg_stat_statements.track": "none"},
}
DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
REPLICA_DATABASE = "shopapi_replica"  # the standby's entry in each server's PgBouncer

# pgbouncer_ab.py's servers connect through it (start_pgbouncer()); shopapi_server() with a
# primary starts one of its own for each server instead.
PGBOUNCER: PgBouncer | None = None


def start_pgbouncer() -> PgBouncer:
    """PgBouncer in transaction mode in front of the bench database's server, configured as
    ops/pgbouncer.ini says (stopped when the bench exits)."""
    global PGBOUNCER
    PGBOUNCER = PgBouncer(URL)
    atexit.register(PGBOUNCER.stop)
    return PGBOUNCER


def write_clients(path: pathlib.Path, tokens: AccessTokens) -> None:
    """The Lua data file bench/mix.lua reads: a token for every seeded user (a customer) and
    for some partners, as an authorisation server would have issued them."""
    customers = ROLE_SCOPES["customer"]
    with database.connection_context():
        user_ids = [user.id for user in User.select(User.id).order_by(User.id)]
    users = ",\n".join(f'{{{uid}, "{tokens.issue(str(uid), customers)}"}}' for uid in user_ids)
    partners = ",\n".join(
        f'"{tokens.issue(str(uid), ROLE_SCOPES["partner"])}"' for uid in user_ids[:PARTNERS]
    )
    categories = ", ".join(f'"{c}"' for c in CATEGORIES)
    path.write_text(
        f"return {{\nusers = {{\n{users}\n}},\npartners = {{\n{partners}\n}},\n"
        f"products = {PRODUCTS},\ncategories = {{{categories}}},\n}}\n"
    )


def revalidations_of(data: pathlib.Path) -> pathlib.Path:
    """The Lua data file of `conditional` (bench/mix.lua), beside the clients' `data`."""
    return data.with_name("revalidations.lua")


def write_revalidations(data: pathlib.Path, server: "Server", tokens: AccessTokens) -> int:
    """The pages `conditional` revalidates: the list's page of each category for each of
    REVALIDATING_USERS customers, fetched now with their ETags, as clients hold them (an ETag
    is the caller's: their user and scopes are in it). Nothing may write from here until the
    conditional rounds are over. The number of pages."""
    customers = ROLE_SCOPES["customer"]
    with database.connection_context():
        user_ids = [u.id for u in User.select(User.id).order_by(User.id).limit(REVALIDATING_USERS)]
    connection = http.client.HTTPConnection(server.host, server.port, timeout=30)
    held = []
    for uid in user_ids:
        token = tokens.issue(str(uid), customers)
        for category in CATEGORIES:
            path = f"/v1/products?category={category}&sort=-price_cents&per_page=20"
            connection.request("GET", path, headers={"Authorization": f"Bearer {token}"})
            response = connection.getresponse()
            response.read()
            tag = response.getheader("ETag")
            if response.status != 200 or not tag:
                raise SystemExit(f"GET {path}: {response.status}, ETag {tag}")
            held.append(f'{{"{token}", "{path}", {json.dumps(tag)}}}')
    connection.close()
    revalidations_of(data).write_text("return {\n" + ",\n".join(held) + "\n}\n")
    return len(held)


class Server:
    """A server process group started for the benchmark, stopped with SIGTERM."""

    host = "127.0.0.1"

    def __init__(
        self, name: str, argv: list[str], env: dict, port: int, log_dir: pathlib.Path,
        bouncer: PgBouncer | None = None,
    ):  # fmt: skip
        # `bouncer`: the PgBouncer the server's workers connect through, whose CPU wrk() counts.
        self.name, self.port, self.bouncer = name, port, bouncer
        self.log = open(log_dir / f"{name}.log", "wb")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(  # noqa: S603 (our own servers)
            argv, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        self._wait_until_listening()

    def _wait_until_listening(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"{self.name} exited; see {self.log.name}")
            with contextlib.suppress(OSError):
                connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                connection.request("GET", "/v1/products/1")
                connection.getresponse().read()
                return
            time.sleep(0.2)
        raise SystemExit(f"{self.name} did not answer on port {self.port}")

    def cpu_seconds(self, kernel: bool = False) -> float:
        return cpu.tree_seconds(self.process.pid, kernel)

    def stop(self) -> None:
        """Stop the server, and its own PgBouncer (once; stopping a stopped server does
        nothing)."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=30)
        self.log.close()
        if self.bouncer is not None and self.bouncer is not PGBOUNCER:
            self.bouncer.stop()


def server_secrets() -> tuple[dict, AccessTokens]:
    """The secrets every server of a run shares, as hosts would (environment variables), and the
    issuer of the clients' tokens that they trust."""
    env = {
        "JWT_SECRET": secrets.token_urlsafe(32),
        "HMAC_SECRET": secrets.token_urlsafe(32),
        # The clients' tokens last a run; a server refuses a token of its issuer that lasts longer.
        "ACCESS_TOKEN_TTL": "3600",
    }
    tokens = AccessTokens(Settings(jwt_secret=env["JWT_SECRET"].encode(), access_token_ttl=3600))
    return env, tokens


def shopapi_server(
    name, port, workers, secrets_env, log_dir, primary: str | None = None,
    replica: str | None = None, settings: dict | None = None,
) -> Server:  # fmt: skip
    """The production server as `make serve-prod` starts it, every feature on. With `primary`
    (and `replica`, a hot standby of it): through a PgBouncer of its own, as on a host of its
    own, the standby an entry of that PgBouncer's. Without: BENCH_DATABASE_URL, through
    PGBOUNCER if started."""
    env = {
        **os.environ,
        **secrets_env,
        "BIND": f"127.0.0.1:{port}",
        "WEB_CONCURRENCY": str(workers),
        "SHARED_STORE_URL": REDIS,
        "PROMETHEUS_MULTIPROC_DIR": tempfile.mkdtemp(prefix=f"{name}-metrics-", dir=log_dir),
        **(settings or {}),  # an A/B's variant (bench/admission_ab.py)
    }
    env.pop("RATE_LIMIT_SCALE", None)  # the spec's real limits
    env.pop("DATABASE_REPLICA_URLS", None)
    if primary is None:
        bouncer = PGBOUNCER
        env["DATABASE_URL"] = PGBOUNCER.url(URL) if PGBOUNCER else URL
    else:
        bouncer = PgBouncer(primary, aliases={REPLICA_DATABASE: replica} if replica else None)
        atexit.register(bouncer.stop)  # should the server not start
        env["DATABASE_URL"] = bouncer.url(primary)
        if replica:
            env["DATABASE_REPLICA_URLS"] = bouncer.alias_url(REPLICA_DATABASE)
    argv = [str(BIN / "gunicorn"), "-c", "ops/gunicorn.conf.py", "app:create_app()"]
    return Server(name, argv, env, port, log_dir, bouncer=bouncer)


def baseline_server(log_dir, database_url: str = URL) -> Server:
    argv = [str(BIN / "gunicorn"), "-w", "2", "-b", f"127.0.0.1:{BASELINE_PORT}"]
    argv.append("bench.baseline_app:create_app()")
    env = {**os.environ, "BENCH_DATABASE_URL": database_url}
    return Server("baseline", argv, env, BASELINE_PORT, log_dir)


def floor_server(log_dir, database_url: str = URL) -> Server:
    """The baseline's list on the fixed stack with no feature (bench/floor_app.py), served as
    shopapi is: gunicorn's uvicorn workers, as many as the baseline's."""
    argv = [str(BIN / "gunicorn"), "-w", "2", "-k", "uvicorn_worker.UvicornWorker"]
    argv += ["-b", f"127.0.0.1:{FLOOR_PORT}", "bench.floor_app:create_app()"]
    env = {**os.environ, "BENCH_DATABASE_URL": database_url}
    return Server("floor", argv, env, FLOOR_PORT, log_dir)


def cpu_seconds(servers: list[Server]) -> dict[str, float]:
    """CPU seconds used so far by the servers (app), each database cluster (primary, replica)
    and the servers' PgBouncers, from one reading of /proc."""
    bouncers = {id(b): b for s in servers if (b := getattr(s, "bouncer", None)) is not None}
    groups = {"pgbouncer": [bouncer.pid for bouncer in bouncers.values()]}
    groups |= {name: [cluster.postmaster_pid()] for name, cluster in CLUSTERS.items()}
    seconds = cpu.trees_seconds(groups)
    # The servers' own sums: a Balanced (bench/scale_out.py) counts its hosts and balancer.
    seconds["app"] = sum(server.cpu_seconds() for server in servers)
    # Of it, the kernel's (system calls: the network, Redis, PgBouncer, the log): its share moves
    # with the machine more than the interpreter's work does.
    seconds["app_kernel"] = sum(server.cpu_seconds(kernel=True) for server in servers)
    if not CLUSTERS:
        seconds["primary"] = cpu.program_seconds("postgres")
    seconds.setdefault("replica", 0.0)
    return seconds


def wrk(
    servers: list[Server], data: pathlib.Path, mix: str, seconds: float, rate: float = 0,
    connections: int = CONNECTIONS,
) -> dict:  # fmt: skip
    """One wrk run against `servers` (round-robin), with the CPU each side used meanwhile."""
    env = {
        **os.environ,
        "BENCH_DATA": str(data),
        "BENCH_MIX": mix,
        "BENCH_REVALIDATIONS": str(revalidations_of(data)),
        "BENCH_RATE": str(rate / THREADS),
        "BENCH_ADDRS": ",".join(f"{server.host}:{server.port}" for server in servers),
    }
    url = f"http://{servers[0].host}:{servers[0].port}"
    argv = ["wrk", f"-t{THREADS}", f"-c{connections}", f"-d{seconds}s", "-s", "bench/mix.lua", url]
    before = cpu_seconds(servers)
    load_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    finished = subprocess.run(  # noqa: S603 (wrk, our arguments)
        argv, cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    load_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = {name: value - before[name] for name, value in cpu_seconds(servers).items()}
    load_seconds = sum(
        getattr(load_after, field) - getattr(load_before, field)
        for field in ("ru_utime", "ru_stime")
    )
    run = _parse(finished.stdout)
    requests = max(run["requests"], 1)
    expected = EXPECTED_STATUSES.get(mix)
    failed = sum(
        count
        for status, count in run["statuses"].items()
        if (status not in expected if expected else status >= 400)
    )
    served = sum(count for status, count in run["statuses"].items() if 200 <= status < 300)
    return {
        "mix": mix,
        "offered_rate": rate or None,
        "connections": connections,
        "requests": run["requests"],
        "throughput": run["requests"] / (run["duration_us"] / 1e6),
        # The 2xx answers a second: what the clients got done.
        "goodput": served / (run["duration_us"] / 1e6),
        "socket_errors": int(
            sum(run[f"errors_{kind}"] for kind in ("connect", "read", "write", "timeout"))
        ),
        # Timed from each request's due time on the schedule (bench/mix.lua; shopapi only).
        "timed_ms": _timed(run, "timed_all"),
        "timed_ok_ms": _timed(run, "timed_ok"),
        "timed_shed_ms": _timed(run, "timed_shed"),
        "shed_without_retry_after": int(run.get("shed_without_retry_after", 0)),
        "latency_ms": {p: run[f"latency_{p}_us"] / 1000 for p in ("p50", "p90", "p95", "p99")},
        "errors": int(
            sum(run[f"errors_{kind}"] for kind in ("connect", "read", "write", "timeout"))
        )
        + failed,
        "statuses": run["statuses"],
        "error_bodies": run["error_bodies"],
        "app_cpu_ms": used["app"] * 1000 / requests,
        "app_kernel_cpu_ms": used["app_kernel"] * 1000 / requests,
        "primary_cpu_ms": used["primary"] * 1000 / requests,
        "replica_cpu_ms": used["replica"] * 1000 / requests,
        # Every PostgreSQL process: the primary's and the replica's.
        "database_cpu_ms": (used["primary"] + used["replica"]) * 1000 / requests,
        "pgbouncer_cpu_ms": used["pgbouncer"] * 1000 / requests,
        "load_generator_cpu_ms": load_seconds * 1000 / requests,
    }


def _timed(run: dict, name: str) -> dict:
    """mix.lua's percentiles of the answers called `name`, and how many there were."""
    timed = {"count": int(run.get(f"{name}_count", 0))}
    timed |= {p: run[f"{name}_{p}_ms"] for p in ("p50", "p90", "p99", "max") if timed["count"]}
    return timed


def _parse(output: str) -> dict:
    run: dict = {"statuses": {}, "error_bodies": {}}
    for line in output.splitlines():
        if not line.startswith("BENCH "):
            continue
        _, key, value = line.split(" ", 2)
        if key.startswith("status_"):
            status = int(key.removeprefix("status_"))
            run["statuses"][status] = run["statuses"].get(status, 0) + int(value)
        elif key.startswith("error_body_"):
            run["error_bodies"][int(key.removeprefix("error_body_"))] = value[:500]
        else:
            run[key.replace(".", "_")] = float(value)
    return run


def medians(runs: list[dict]) -> dict:
    keys = ("throughput", "goodput", "app_cpu_ms", "app_kernel_cpu_ms", "database_cpu_ms")
    keys += ("load_generator_cpu_ms",)
    keys += ("pgbouncer_cpu_ms", "primary_cpu_ms", "replica_cpu_ms")
    summary = {key: statistics.median(run[key] for run in runs) for key in keys}
    summary["latency_ms"] = {
        p: statistics.median(run["latency_ms"][p] for run in runs) for p in runs[0]["latency_ms"]
    }
    summary["errors"] = sum(run["errors"] for run in runs)
    summary["requests"] = sum(run["requests"] for run in runs)
    summary["statuses"] = {}
    for run in runs:
        for status, count in run["statuses"].items():
            summary["statuses"][status] = summary["statuses"].get(status, 0) + count
    return summary


def say(message: str) -> None:
    print(message, flush=True)


def compare_list(servers: dict[str, Server], revalidated: Server, data) -> tuple[dict, dict]:
    """The list on each of `servers` (baseline, floor, shopapi) and the list revalidated on
    `revalidated` (`conditional`, its statements counted), in interleaved rounds: the list's
    summary and the conditional's. The pages revalidated must be written first
    (write_revalidations()), and nothing may write meanwhile."""
    phases = {name: (server, "list") for name, server in servers.items()}
    phases["conditional"] = (revalidated, "conditional")
    say(f"list: {', '.join(phases)}, {ROUNDS} interleaved rounds of {ROUND_SECONDS} s")
    for server, mix in phases.values():
        wrk([server], data, mix, WARM_UP_SECONDS)
    runs = {name: [] for name in phases}
    for _ in range(ROUNDS):
        for name, (server, mix) in phases.items():
            measure = wrk_counting_statements if mix == "conditional" else wrk
            runs[name].append(measure([server], data, mix, ROUND_SECONDS))
            say(_line(f"  {name}", runs[name][-1]))
    rounds = runs.pop("conditional")
    conditional = {**medians(rounds), "statements": statements_summary(rounds), "rounds": rounds}
    summary = {name: medians(rounds) for name, rounds in runs.items()}
    summary["app_cpu_ratio"] = summary["shopapi"]["app_cpu_ms"] / summary["baseline"]["app_cpu_ms"]
    summary["floor_ratio"] = summary["floor"]["app_cpu_ms"] / summary["baseline"]["app_cpu_ms"]
    summary["rounds"] = runs
    return summary, conditional


def measure_mixes(shopapi: Server, data) -> dict:
    """The mix in v1 and as a v3 client sends it (`mix_v3`), in interleaved rounds."""
    mixes = ("mix", "mix_v3")
    say(f"{' and '.join(mixes)}: {ROUNDS} interleaved rounds of {ROUND_SECONDS} s")
    for mix in mixes:
        wrk([shopapi], data, mix, WARM_UP_SECONDS)
    runs = {mix: [] for mix in mixes}
    for _ in range(ROUNDS):
        for mix in mixes:
            runs[mix].append(wrk([shopapi], data, mix, ROUND_SECONDS))
            say(_line(f"  {mix}", runs[mix][-1]))
    return {mix: {**medians(rounds), "rounds": rounds} for mix, rounds in runs.items()}


# The tables a statement reads: Peewee quotes their names, SQL written by hand may not.
TABLES_READ = re.compile(r'\b(?:FROM|JOIN)\s+"?(\w+)"?', re.IGNORECASE)
LISTED_TABLE = Product._meta.table_name  # what `conditional`'s page would read rows and count from


def wrk_counting_statements(servers: list[Server], data, mix: str, seconds: float) -> dict:
    """wrk(), with the statements each cluster ran meanwhile (pg_stat_statements, counting only
    for this run): their calls by the tables each statement reads, and the text of those that
    read the listed table. The settings change outside wrk's window; every backend applies them
    at its next statement, before running it."""
    time.sleep(SETTLE_SECONDS)  # the previous run's last requests, out of the count and the CPU
    count_statements(True)
    try:
        before = {name: statement_calls(cluster) for name, cluster in CLUSTERS.items()}
        run = wrk(servers, data, mix, seconds)
        after = {name: statement_calls(cluster) for name, cluster in CLUSTERS.items()}
    finally:
        count_statements(False)
    run["statements"] = {name: _calls_made(before[name], after[name]) for name in CLUSTERS}
    return run


def count_statements(on: bool) -> None:
    """pg_stat_statements counting (query ids computed) on every cluster, or not; returns once
    each postmaster has reloaded, and so signalled its backends."""
    track = STATEMENTS_COUNTED[on]["pg_stat_statements.track"]
    for cluster in CLUSTERS.values():
        alter_system(cluster.url, STATEMENTS_COUNTED[on])
        wait_for(
            lambda cluster=cluster: cluster.query("SHOW pg_stat_statements.track")[0][0] == track,
            10, f"pg_stat_statements.track = {track}",
        )  # fmt: skip


def statement_calls(cluster) -> dict:
    """pg_stat_statements' calls so far of each statement in the bench's database (not this
    reading's own): {(user, query id): (calls, text)}."""
    rows = cluster.query(
        "SELECT userid, queryid, calls, query FROM pg_stat_statements WHERE dbid = "
        "(SELECT oid FROM pg_database WHERE datname = current_database()) "
        "AND query NOT LIKE %s",
        ("%pg_stat_statements%",),
    )
    return {(user, query): (calls, text) for user, query, calls, text in rows}


def _calls_made(before: dict, after: dict) -> dict[str, dict[str, int]]:
    """The calls made between two readings, by the tables the statements read ("-": none), and
    by statement for those that read the listed table."""
    calls: dict[str, dict[str, int]] = {"by_tables": {}, "reading_listed_table": {}}
    for key, (count, text) in after.items():
        if made := count - before.get(key, (0, ""))[0]:
            read = sorted(set(TABLES_READ.findall(text)))
            tables = ", ".join(read) or "-"
            calls["by_tables"][tables] = calls["by_tables"].get(tables, 0) + made
            if LISTED_TABLE in read:
                listed = calls["reading_listed_table"]
                listed[text[:300]] = listed.get(text[:300], 0) + made
    return calls


def statements_summary(rounds: list[dict]) -> dict:
    """The statements of all `rounds` on each cluster, per request and by the tables they read,
    and how many read the listed table (the page's rows or its count)."""
    requests = max(sum(run["requests"] for run in rounds), 1)
    summary: dict = {"requests": requests, "reading_listed_table": 0}
    for name in rounds[0]["statements"]:
        calls: dict[str, dict[str, int]] = {"by_tables": {}, "reading_listed_table": {}}
        for run in rounds:
            for kind, counted in run["statements"][name].items():
                for key, made in counted.items():
                    calls[kind][key] = calls[kind].get(key, 0) + made
        summary["reading_listed_table"] += sum(calls["reading_listed_table"].values())
        total = sum(calls["by_tables"].values())
        summary[name] = {"calls": total, "per_request": total / requests, **calls}
    return summary


def measure_operations(shopapi: Server, data) -> dict:
    say(f"operations: each alone, {OPERATION_SECONDS} s")
    costs = {}
    for operation in OPERATIONS:
        wrk([shopapi], data, operation, 1)
        costs[operation] = wrk([shopapi], data, operation, OPERATION_SECONDS)
        say(_line(f"  {operation:9s}", costs[operation]))
    return costs


def open_loop_saturation(shopapi: Server, data, closed: dict) -> dict:
    """What the server serves of `mix_v3` at a constant rate: the 2xx a second it answers offered
    the closed loop's rate (`closed`, on CONNECTIONS) from open_connections(). The closed loop
    keeps a dozen requests at the server and sends the next as soon as one is answered; the
    open loop's hundreds of connections, each paced, cost the server and wrk more a request, and
    on these machines it served 0.6 to 0.8 of the closed loop's rate: fractions of the closed
    loop's would put 0.7 past what the server sustains."""
    rate = round(closed["goodput"])
    run = wrk(
        [shopapi], data, "mix_v3", STEP_SECONDS, rate=rate, connections=open_connections(rate)
    )
    say(f"open-loop saturation: offered the closed loop's {rate}/s, 2xx {run['goodput']:.0f}/s")
    return {"closed_loop": closed["goodput"], "offered_rate": rate, **run}


def step_load(shopapi: Server, data, saturated: float) -> list[dict]:
    """`mix_v3` at a constant rate, fractions of its saturated rate, on open_connections(): the
    rate offered holds while answers take up to OPEN_SECONDS, and each answer is timed from its
    due time."""
    say(f"steps: mix_v3 at a constant rate, {STEP_SECONDS} s a step ({OVERLOAD_SECONDS} s past 1)")
    steps = []
    for fraction in STEP_FRACTIONS:
        rate = round(saturated * fraction)
        seconds = OVERLOAD_SECONDS if fraction > 1 else STEP_SECONDS
        with WorkerBalance(shopapi, seconds) as balance:
            run = wrk(
                [shopapi], data, "mix_v3", seconds, rate=rate, connections=open_connections(rate)
            )
        steps.append({**step_of(fraction, saturated, run), "workers": balance.workers})
        say(step_line(steps[-1]))
    return steps


class WorkerBalance:
    """How a step's load fell on the server's workers: each worker's CPU (cores busy) and the
    clients' connections it held halfway through (ss). The kernel gives a new connection to
    whichever worker accepts it first, and a connection stays with its worker."""

    def __init__(self, server: Server, seconds: float):
        self.server, self.seconds = server, seconds
        self.workers: list[dict] = []

    def __enter__(self):
        self.pids = cpu.children(self.server.process.pid)
        self.before = {pid: cpu.tree_seconds(pid) for pid in self.pids}
        self.started = time.monotonic()
        self.held: dict[int, int] = {}
        self.sampler = threading.Thread(target=self._sample, daemon=True)
        self.sampler.start()
        return self

    def _sample(self) -> None:
        time.sleep(self.seconds / 2)
        listing = subprocess.run(  # noqa: S603 (iproute2's ss, our arguments)
            ["ss", "-tnpH", "state", "established", f"( sport = :{self.server.port} )"],  # noqa: S607
            capture_output=True,
            text=True,
        ).stdout
        self.held = {pid: listing.count(f"pid={pid},") for pid in self.pids}

    def __exit__(self, *exc) -> None:
        elapsed = time.monotonic() - self.started
        self.sampler.join()
        self.workers = [
            {
                "pid": pid,
                "cores": (cpu.tree_seconds(pid) - self.before[pid]) / elapsed,
                "connections": self.held.get(pid, 0),
            }
            for pid in self.pids
        ]


def step_of(fraction: float, saturated: float, run: dict) -> dict:
    """A step as load.json gives it: besides wrk()'s summary, the latencies of every answer and
    of the 2xx alone, and what went wrong: below saturation any answer but a 2xx; past it any
    answer but a 2xx or a 503 with Retry-After."""
    statuses = run["statuses"]
    other = sum(count for status, count in statuses.items() if not 200 <= status < 300)
    if fraction >= 1:
        other -= statuses.get(503, 0) - run["shed_without_retry_after"]
    return {
        "fraction": fraction,
        "saturated_rate": saturated,
        **run,
        "errors": run["socket_errors"] + other,
        "latency_ms": run["timed_ms"],
        "latency_ok_ms": run["timed_ok_ms"],
        "latency_shed_ms": run["timed_shed_ms"],
    }


def step_line(step: dict) -> str:
    every, ok = step["latency_ms"], step["latency_ok_ms"]
    return (
        f"  {step['fraction']:.1f} offered {step['offered_rate']:5d}/s: "
        f"2xx {step['goodput']:6.0f}/s p50 {ok.get('p50', 0):6.1f} p99 {ok.get('p99', 0):7.1f} "
        "ms; every answer p99 "
        f"{every.get('p99', 0):7.1f} ms; statuses {step['statuses']}; errors {step['errors']}"
        + (f"; workers {workers_of(step)}" if step.get("workers") else "")
    )


def workers_of(step: dict) -> str:
    """Each worker's connections and cores busy: `371 conn 0.74 / 141 conn 0.33`."""
    return " / ".join(
        f"{worker['connections']} conn {worker['cores']:.2f}" for worker in step["workers"]
    )


def list_tail(servers: dict[str, Server], data, listed: dict) -> dict:
    """The v1 list on each server at LIST_TAIL_FRACTION of its own saturated rate (compare_list's
    throughput), in turn: p50 and p99 as wrk times them (the baseline and the floor stamp no
    X-Request-ID)."""
    say(f"list tail: each server at {LIST_TAIL_FRACTION} of its own saturation, {STEP_SECONDS} s")
    tail = {}
    for name, server in servers.items():
        rate = round(listed[name]["goodput"] * LIST_TAIL_FRACTION)
        connections = open_connections(rate)
        run = wrk([server], data, "list", STEP_SECONDS, rate=rate, connections=connections)
        tail[name] = {
            "offered_rate": rate,
            "p50": run["latency_ms"]["p50"],
            "p99": run["latency_ms"]["p99"],
            "errors": run["errors"],
        }
        say(f"  {name:8s} {rate:5d}/s: p50 {tail[name]['p50']:.1f} p99 {tail[name]['p99']:.1f} ms")
    return tail


def scale_out(data, secrets_env, tokens: AccessTokens, log_dir, replication) -> dict:
    """One instance against two, each a single worker, in interleaved rounds."""
    say("scale-out: one instance (1 worker) against two (1 worker each), round-robin")
    primary, replica = replication.primary.url, replication.standby.url
    first, second = (
        shopapi_server(f"instance-{port}", port, 1, secrets_env, log_dir, primary, replica)
        for port in SCALE_OUT_PORTS
    )
    try:
        wrk([first, second], data, "mix", WARM_UP_SECONDS)
        runs = {"one": [], "two": []}
        for _ in range(max(ROUNDS - 1, 1)):
            runs["one"].append(wrk([first], data, "mix", ROUND_SECONDS))
            say(_line("  one instance ", runs["one"][-1]))
            time.sleep(SETTLE_SECONDS)
            before = _stock_and_orders()
            runs["two"].append(wrk([first, second], data, "mix", ROUND_SECONDS))
            say(_line("  two instances", runs["two"][-1]))
        time.sleep(SETTLE_SECONDS)
        consistency = _data_consistency(before, runs["two"][-1])
        consistency["rate_limit"] = _rate_limit_across([first, second], tokens)
        consistency["standby"] = _standby_consistency(replication)
    finally:
        first.stop()
        second.stop()
    summary = {name: medians(rounds) for name, rounds in runs.items()}
    summary["throughput_ratio"] = summary["two"]["throughput"] / summary["one"]["throughput"]
    return {**summary, "consistency": consistency, "rounds": runs}


def _stock_and_orders() -> dict:
    with database.connection_context():
        return {
            "stock": Product.select(fn.SUM(Product.stock)).scalar(),
            "last_order": Order.select(fn.MAX(Order.id)).scalar(),
            "last_event": Event.select(fn.MAX(Event.id)).scalar() or 0,
        }


def _data_consistency(before: dict, run: dict) -> dict:
    """After a run on two instances: every 201 is one order in the database, with its
    `order.created` event, and the stock fell by exactly what those orders took. wrk stops with
    requests under way, uncounted: up to one order per connection may be placed unanswered."""
    with database.connection_context():
        orders = Order.select().where(Order.id > before["last_order"])
        taken = (
            OrderItem.select(fn.SUM(OrderItem.quantity))
            .where(OrderItem.order_id > before["last_order"])
            .scalar()
        ) or 0
        stock_fell = before["stock"] - Product.select(fn.SUM(Product.stock)).scalar()
        events = (
            Event.select()
            .where(Event.id > before["last_event"], Event.type == "order.created")
            .count()
        )
        placed = orders.count()
    created = run["statuses"].get(201, 0)
    return {
        "orders_answered_201": created,
        "orders_in_database": placed,
        "order_created_events": events,
        "stock_taken_by_those_orders": taken,
        "stock_fell_by": stock_fell,
        "consistent": created <= placed <= created + run["connections"]
        and placed == events
        and taken == stock_fell,
    }


def _standby_consistency(replication) -> dict:
    """Once the standby has replayed all the primary wrote, it holds the same orders, items,
    events and stock."""
    wait_for(replication.replayed_everything, 120, "the standby replays the run's writes")
    counts = ", ".join(
        f'(SELECT count(*) FROM "{model._meta.table_name}")' for model in (Order, OrderItem, Event)
    )
    sql = f'SELECT {counts}, (SELECT sum(stock) FROM "{Product._meta.table_name}")'
    primary, standby = (
        server.query(sql)[0] for server in (replication.primary, replication.standby)
    )
    return {
        "primary": [int(value) for value in primary],
        "standby": [int(value) for value in standby],
        "consistent": primary == standby,
    }


def _rate_limit_across(servers: list[Server], tokens: AccessTokens) -> dict:
    """One client's requests alternately to each instance: the shared limit (the spec's
    1000/minute for a product read) lets exactly that many through, wherever they land."""
    limit, extra = 1000, 20
    token = tokens.issue(f"client:limit-probe-{secrets.token_hex(4)}", ["products:read"])
    connections = [http.client.HTTPConnection("127.0.0.1", server.port) for server in servers]
    answered: dict[int, int] = {}
    for n in range(limit + extra):
        connection = connections[n % len(connections)]
        connection.request("GET", "/v1/products/1", headers={"Authorization": f"Bearer {token}"})
        response = connection.getresponse()
        response.read()
        answered[response.status] = answered.get(response.status, 0) + 1
    return {
        "limit": limit,
        "sent": limit + extra,
        "answered": answered,
        "consistent": answered == {200: limit, 429: extra},
    }


def _line(label: str, run: dict) -> str:
    latency = run["latency_ms"]
    return (
        f"{label}: {run['throughput']:7.0f} req/s  p50 {latency['p50']:6.1f}  "
        f"p99 {latency['p99']:7.1f} ms  app {run['app_cpu_ms']:.2f} + primary "
        f"{run['primary_cpu_ms']:.2f} + replica {run['replica_cpu_ms']:.2f} + pgbouncer "
        f"{run['pgbouncer_cpu_ms']:.2f} CPU-ms/req  errors {run['errors']}"
    )


def main() -> int:
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")
    started = time.monotonic()
    secrets_env, tokens = server_secrets()
    results: dict = {
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "kernel": platform.release(),
        },
        "load": {
            "connections": CONNECTIONS,
            "wrk_threads": THREADS,
            "rounds": ROUNDS,
            "round_seconds": ROUND_SECONDS,
            "quick": QUICK,
        },
        "load_average": {"before": os.getloadavg()[0]},
    }
    with (
        seeded_clusters() as replication,
        tempfile.TemporaryDirectory(prefix="shopapi-bench-") as scratch,
    ):
        primary, replica = replication.primary.url, replication.standby.url
        scratch = pathlib.Path(scratch)
        data = scratch / "clients.lua"
        write_clients(data, tokens)
        shopapi = shopapi_server(
            "shopapi", SHOPAPI_PORT, os.cpu_count(), secrets_env, scratch, primary, replica
        )
        baseline = baseline_server(scratch, primary)
        floor = floor_server(scratch, primary)
        try:
            # Before anything writes: the pages then stay as the clients hold them.
            pages = write_revalidations(data, shopapi, tokens)
            say(f"{pages} list pages fetched with their ETags, for `conditional`")
            results["list"], results["conditional"] = compare_list(
                {"baseline": baseline, "floor": floor, "shopapi": shopapi}, shopapi, data
            )
            results["list_tail"] = list_tail(
                {"shopapi": shopapi, "baseline": baseline, "floor": floor}, data, results["list"]
            )
            baseline.stop()
            floor.stop()
            mixes = measure_mixes(shopapi, data)
            results["mix"], results["mix_v3"] = mixes["mix"], mixes["mix_v3"]
            results["operations"] = measure_operations(shopapi, data)
            results["open_loop"] = open_loop_saturation(shopapi, data, results["mix_v3"])
            results["steps"] = step_load(shopapi, data, results["open_loop"]["goodput"])
        finally:
            shopapi.stop()
            baseline.stop()
            floor.stop()
        results["scale_out"] = scale_out(data, secrets_env, tokens, scratch, replication)
    results["seconds"] = time.monotonic() - started
    results["load_average"]["after"] = os.getloadavg()[0]
    results["goals"] = goals(results)
    name = "load-quick" if QUICK else "load"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n")
    report = markdown(results)
    (RESULTS / f"{name}.md").write_text(report)
    plot.latency_against_load(results["steps"], RESULTS / f"{name}.png")
    print("\n" + report)
    failures = _failures(results)
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


@contextlib.contextmanager
def seeded_clusters():
    """The bench's primary and hot standby, seeded, durable, with pg_stat_statements, their
    CPU read apart (CLUSTERS) until the block ends."""
    started = time.monotonic()
    with primary_and_standby(CLUSTER_SETTINGS) as replication:
        say(f"primary and standby started in {time.monotonic() - started:.0f} s")
        seed_both(replication)
        say(f"primary seeded, its tables all-visible at {time.monotonic() - started:.0f} s")
        for cluster in (replication.primary, replication.standby):
            durable(cluster.url)
        statements_extension(replication.primary.url)
        wait_for(replication.replayed_everything, 600, "the standby replays the extension")
        say(f"standby caught up at {time.monotonic() - started:.0f} s")
        CLUSTERS.update(primary=replication.primary, replica=replication.standby)
        try:
            yield replication
        finally:
            CLUSTERS.clear()


# The seeded tables, vacuumed until every page of each is all-visible (see all_visible).
SEEDED_TABLES = tuple(model._meta.table_name for model in (Product, User, Order, OrderItem))


def seed_both(replication) -> None:
    """The bench's data set on the primary, replayed by the standby, every page all-visible."""
    seed(replication.primary.url)
    wait_for(replication.replayed_everything, 600, "the standby replays the seed")
    wait_for(lambda: all_visible(replication.primary.url), 120, "the seeded tables all-visible")
    wait_for(replication.replayed_everything, 600, "the standby replays that VACUUM")


def all_visible(url: str) -> bool:
    """VACUUM the seeded tables, and whether it marked every page of each all-visible, as
    autovacuum keeps them in production: a list's COUNT(*) then reads only an index, on the
    primary and on the standby alike. The seed's own VACUUM comes too soon: the standby's
    hot_standby_feedback still holds back an xmin older than the seed, and no page is marked
    (both clusters then counted from the heap, the standby at a higher cost per row)."""
    connection = psycopg2.connect(url)
    connection.autocommit = True  # VACUUM runs outside a transaction
    try:
        with connection.cursor() as cursor:
            for table in SEEDED_TABLES:
                cursor.execute(f'VACUUM "{table}"')
            cursor.execute(
                "SELECT relallvisible >= relpages FROM pg_class WHERE relname = ANY(%s)",
                (list(SEEDED_TABLES),),
            )
            marked = [row[0] for row in cursor.fetchall()]
    finally:
        connection.close()
    return len(marked) == len(SEEDED_TABLES) and all(marked)


def durable(url: str) -> None:
    """Production's durability (DURABLE) on the cluster of `url`, from now on."""
    alter_system(url, DURABLE)


def alter_system(url: str, settings: dict[str, str]) -> None:
    """`settings` on the cluster of `url` (ALTER SYSTEM), reloaded."""
    connection = psycopg2.connect(url)
    connection.autocommit = True  # ALTER SYSTEM runs outside a transaction
    try:
        with connection.cursor() as cursor:
            for name, value in settings.items():
                cursor.execute(f"ALTER SYSTEM SET {name} = {value}")
            cursor.execute("SELECT pg_reload_conf()")
    finally:
        connection.close()


def statements_extension(url: str) -> None:
    """pg_stat_statements' view in the bench's database on the cluster of `url` (a primary: its
    standby has it once it replays)."""
    connection = psycopg2.connect(url)
    connection.autocommit = True
    try:
        with connection.cursor() as cursor:
            cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    finally:
        connection.close()


def _errors(results: dict) -> int:
    listed = results["list"]
    saturated = [listed["baseline"], listed["floor"], listed["shopapi"], results["conditional"]]
    saturated += [results["mix"], results["mix_v3"]]
    saturated += [results["scale_out"]["one"], results["scale_out"]["two"]]
    errors = sum(summary["errors"] for summary in saturated)
    errors += sum(step["errors"] for step in results["steps"])
    return errors + sum(run["errors"] for run in results["operations"].values())


def _failures(results: dict) -> list[str]:
    failures = []
    if errors := _errors(results):
        failures.append(f"{errors} requests failed (see statuses and error_bodies in load.json)")
    consistency = results["scale_out"]["consistency"]
    if not consistency["consistent"]:
        failures.append(f"data differs across instances: {consistency}")
    if not consistency["rate_limit"]["consistent"]:
        failures.append(f"rate limit not shared: {consistency['rate_limit']}")
    if not consistency["standby"]["consistent"]:
        failures.append(f"the standby differs from the primary: {consistency['standby']}")
    return failures


def step_at(steps: list[dict], fraction: float) -> dict:
    return next(step for step in steps if step["fraction"] == fraction)


def cores(summary: dict, *parts: str) -> float:
    """Cores at 100 % busy for 10,000 req/s: the CPU-ms per request of `parts`, times 10."""
    return sum(summary[f"{part}_cpu_ms"] for part in parts) * 10


# What a request of each side costs the servers, for the cores: shopapi's mix, every server
# process (app, primary, replica, PgBouncer); the baseline's list, its app and its database, the
# primary (the standby serves it nothing).
MIX_PARTS, BASELINE_PARTS = ("app", "primary", "replica", "pgbouncer"), ("app", "primary")


def goals(results: dict) -> list[dict]:
    """The goals, each measured in this run: its number, what, the value, the target (the most
    the value may be, or for goodput the least), met, and the measurement in words. T1-T3 are
    issue 41's (latency without degradation); K1-K5 the cost kept from issue 32."""
    listed, conditional = results["list"], results["conditional"]
    baseline, floor, shop = listed["baseline"], listed["floor"], listed["shopapi"]
    steps, tail = results["steps"], results["list_tail"]
    low, high, over = (step_at(steps, f) for f in (LOW, HIGH, OVERLOAD))
    low_p50 = low["latency_ms"]["p50"]
    statements = conditional["statements"]
    reading = statements["reading_listed_table"]
    below = sum(step["errors"] for step in steps if step["fraction"] < 1)
    per_request = ", ".join(
        f"{name} {statements[name]['per_request']:.2f}" for name in ("primary", "replica")
    )

    def goal(
        number: str, what: str, value: float, target: float, measured: str = "", least: bool = False
    ) -> dict:
        # A ratio (x) unless a count, whose target is 0.
        return {"goal": number, "what": what, "value": value, "target": target,
                "unit": "x" if target else "", "least": least,
                "met": value >= target if least else value <= target,
                "measured": measured or f"{value:.3g}x"}  # fmt: skip

    over_ok, over_shed = over["latency_ok_ms"], over["latency_shed_ms"]
    return [
        goal("T1", f"mix_v3 at a constant rate: p99 at {HIGH} of saturation / p50 at {LOW}",
             high["latency_ms"]["p99"] / low_p50, 3.0,
             f"{high['latency_ms']['p99']:.1f} ms at {high['offered_rate']:,.0f} req/s / "
             f"{low_p50:.1f} ms at {low['offered_rate']:,.0f} req/s = "
             f"{high['latency_ms']['p99'] / low_p50:.2f}x"),
        goal("T2a", f"mix_v3 offered {OVERLOAD}x saturation for {OVERLOAD_SECONDS} s: 2xx a "
             "second / the saturated rate", over["goodput"] / over["saturated_rate"], 0.9,
             f"{over['goodput']:,.0f} / {over['saturated_rate']:,.0f} req/s = "
             f"{over['goodput'] / over['saturated_rate']:.2f}x", least=True),
        goal("T2b", f"at {OVERLOAD}x: answers neither 2xx nor a 503 with Retry-After (another "
             "status, a timeout, a refused or reset connection)", over["errors"], 0,
             f"{over['errors']} of {over['requests']:,.0f} ({over['statuses'].get(503, 0):,} "
             f"503s, p99 {over_shed.get('p99', 0):.1f} ms)"),
        goal("T2c", f"at {OVERLOAD}x: p99 of the 2xx / p50 at {LOW}",
             over_ok["p99"] / low_p50, 5.0,
             f"{over_ok['p99']:.1f} ms / {low_p50:.1f} ms = {over_ok['p99'] / low_p50:.2f}x"),
        goal("T3", f"v1 list at {LIST_TAIL_FRACTION} of each one's own saturation: shopapi's p99 "
             "/ the baseline's (gunicorn sync workers)",
             tail["shopapi"]["p99"] / tail["baseline"]["p99"], 1.0,
             f"{tail['shopapi']['p99']:.1f} ms / {tail['baseline']['p99']:.1f} ms = "
             f"{tail['shopapi']['p99'] / tail['baseline']['p99']:.2f}x (the floor's "
             f"{tail['floor']['p99']:.1f} ms)"),
        goal("K1", "v1 list: shopapi's app CPU per request / the floor's list",
             shop["app_cpu_ms"] / floor["app_cpu_ms"], 1.5),
        goal("K2", "v1 list with its exact total: PostgreSQL CPU per request (primary + replica) "
             "/ the baseline list's, which counts every time",
             shop["database_cpu_ms"] / baseline["database_cpu_ms"], 0.3),
        goal("K3", "conditional (the list revalidated with If-None-Match, nothing changed): app "
             "CPU per request / the floor's list", conditional["app_cpu_ms"] / floor["app_cpu_ms"],
             0.6),
        goal("K4", "conditional: requests not answered 304 (another status, a timeout, a failed "
             f"connection), and statements reading `{LISTED_TABLE}`",
             conditional["errors"] + reading, 0,
             f"{conditional['errors']} of {conditional['requests']:,.0f}; {reading} statements "
             f"(all statements per request: {per_request})"),
        goal("K5", "errors below saturation (the steps under 1.0)", below, 0, str(below)),
    ]  # fmt: skip


def goals_report(results: dict) -> list[str]:
    listed, mix, mix_v3 = results["list"], results["mix"], results["mix_v3"]
    baseline = listed["baseline"]
    rows = [
        f"| {goal['goal']} | {goal['what']} | {goal['measured']} | "
        f"{('at least ' if goal['least'] else 'at most ') if goal['unit'] else ''}"
        f"{goal['target']}{goal['unit']} | {'met' if goal['met'] else '**missed**'} |"
        for goal in results["goals"]
    ]
    floor, conditional = listed["floor"], results["conditional"]

    def parts(summary: dict, names: tuple[str, ...]) -> str:
        return " + ".join(f"{part} {summary[f'{part}_cpu_ms']:.2f}" for part in names)

    statements = results["conditional"]["statements"]
    by_tables = "; ".join(
        f"{name}: " + ", ".join(
            f"{tables} {made / statements['requests']:.2f}"
            for tables, made in sorted(statements[name]["by_tables"].items())
        ) for name in ("primary", "replica")
    )  # fmt: skip
    load = results["load_average"]
    low, high = (step_at(results["steps"], f)["latency_ms"] for f in (LOW, HIGH))
    return [
        "The capacity goals, all measured in this one run, on the same primary and standby, "
        "against the plain Flask + Peewee baseline's list and the stack's floor (the same "
        "list function on a bare Connexion FlaskApp, served as shopapi is):",
        "",
        "| # | goal | measured | target | |",
        "|---|---|---|---|---|",
        *rows,
        "",
        f"- Reported, not goals: the v1 mix's app CPU per request is "
        f"**{mix['app_cpu_ms'] / floor['app_cpu_ms']:.2f}x** the floor's list (its recounts are "
        "v1's design); `conditional`'s PostgreSQL CPU per request "
        f"**{conditional['database_cpu_ms'] / baseline['database_cpu_ms']:.3f}x** the baseline "
        "list's.",
        f"- T1 is the product of two ratios: the mix's own spread at {LOW}, p99 / p50 "
        f"**{low['p99'] / low['p50']:.2f}x** (its operations cost from one to four times a "
        f"read: the table under 'Each operation alone'), and what the load adds to the tail, "
        f"p99 at {HIGH} / p99 at {LOW} **{high['p99'] / low['p99']:.2f}x**.",
        f"- Cores for 10,000 req/s (CPU-ms per request x 10, at 100 % busy): mix_v3 "
        f"({parts(mix_v3, MIX_PARTS)}) x 10 = **{cores(mix_v3, *MIX_PARTS):.1f}**; the v1 mix "
        f"({parts(mix, MIX_PARTS)}) x 10 = **{cores(mix, *MIX_PARTS):.1f}** (reported); the "
        f"baseline list ({parts(baseline, BASELINE_PARTS)}) x 10 = "
        f"**{cores(baseline, *BASELINE_PARTS):.1f}**. PgBouncer is counted (shopapi's side only: "
        "the baseline connects directly).",
        f"- The stack's floor, with no feature, costs **{listed['floor_ratio']:.2f}x** the "
        "baseline's app CPU: goals K1 and K3 measure what shopapi adds to it. App CPU-ms per "
        "list request, of which in the kernel: "
        + "; ".join(
            f"{name} {listed[name]['app_cpu_ms']:.2f} ({listed[name]['app_kernel_cpu_ms']:.2f})"
            for name in ("shopapi", "floor", "baseline")
        )
        + f". Without the kernel's part, shopapi's list is "
        f"**{_user_ratio(listed['shopapi'], listed['floor']):.2f}x** the floor's: where the two "
        "ratios differ, what moves with the machine is the cost of system calls, not the "
        "interpreter's work.",
        f"- `conditional`: {statements['requests']:,.0f} revalidations in its rounds; the "
        "statements per request each cluster ran meanwhile, by the tables they read "
        f"(pg_stat_statements, counting only then): {by_tables or 'none'}.",
        f"- Saturation: mix_v3's 2xx a second at a constant rate, offered the closed loop's "
        f"{results['open_loop']['offered_rate']:,} req/s (its 2xx a second, unthrottled on "
        f"{results['load']['connections']} connections): "
        f"{results['open_loop']['goodput']:,.0f} req/s. The steps below offer fractions of it at "
        f"a constant rate on up to {OPEN_CONNECTIONS} connections ({OPEN_SECONDS} s of the rate), "
        "each answer timed from when it was due (bench/mix.lua).",
        f"- Load average (1 min) {load['before']:.1f} before the run, {load['after']:.1f} after, "
        f"on {results['machine']['cores']} cores: above the cores, other work shared the CPU, "
        "and throughput and latency say more about it than about shopapi (CPU per request "
        "much less).",
        "",
    ]


def _user_ratio(one: dict, other: dict) -> float:
    """`one`'s app CPU per request outside the kernel, over `other`'s."""
    return (one["app_cpu_ms"] - one["app_kernel_cpu_ms"]) / (
        other["app_cpu_ms"] - other["app_kernel_cpu_ms"]
    )


def markdown(results: dict) -> str:
    listed, mix, scale = results["list"], results["mix"], results["scale_out"]

    def row(label, summary):
        latency = summary["latency_ms"]
        server_ms = sum(summary[f"{part}_cpu_ms"] for part in MIX_PARTS)
        busy = (server_ms + summary["load_generator_cpu_ms"]) * summary["throughput"] / 1000
        return (
            f"| {label} | {summary['throughput']:,.0f} | {latency['p50']:.1f} | "
            f"{latency['p95']:.1f} | {latency['p99']:.1f} | {summary['errors']} | "
            f"{summary['app_cpu_ms']:.2f} | {summary['primary_cpu_ms']:.2f} | "
            f"{summary['replica_cpu_ms']:.2f} | {summary['pgbouncer_cpu_ms']:.2f} | "
            f"{busy:.1f} | {server_ms * 10:.0f} |"
        )

    machine, load = results["machine"], results["load"]
    quick = [
        "**Quick mode (BENCH_QUICK=1): one round of a few seconds per phase, to try the script. "
        "These numbers are not a measurement.**",
        "",
    ]
    lines = [
        f"# Load benchmark ({machine['cores']} cores, Python {machine['python']}; wrk, "
        f"{load['connections']} connections; "
        + (f"medians of {load['rounds']} rounds" if load["rounds"] > 1 else "one round")
        + f" of {load['round_seconds']} s)",
        "",
        *(quick if load["quick"] else []),
        *goals_report(results),
        "shopapi runs `ops/gunicorn.conf.py` (a worker per core) and reaches PostgreSQL through a "
        "PgBouncer of its own (transaction mode, ops/pgbouncer.ini): the primary as `shopapi`, "
        f"the hot standby as `{REPLICA_DATABASE}` (DATABASE_REPLICA_URLS). The primary and the "
        "standby are the bench's own clusters, seeded for the run; CPU is each cluster's "
        "processes (its postmaster's tree). The baseline connects to the primary directly.",
        "",
        "| run | req/s | p50 ms | p95 ms | p99 ms | errors | app CPU-ms/req "
        "| primary PostgreSQL CPU-ms/req | replica PostgreSQL CPU-ms/req | PgBouncer CPU-ms/req "
        "| cores busy (all: app, databases, PgBouncer, wrk) | server cores for 10,000 req/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        row("list, plain Flask + Peewee baseline", listed["baseline"]),
        row("list, the stack's floor (bare Connexion FlaskApp, uvicorn)", listed["floor"]),
        row("list, shopapi", listed["shopapi"]),
        row("list revalidated (If-None-Match, unchanged: 304), shopapi", results["conditional"]),
        row("mix, shopapi", mix),
        row("mix_v3 (the mix as a v3 client sends it), shopapi", results["mix_v3"]),
        row("mix, one instance of 1 worker", scale["one"]),
        row("mix, two instances of 1 worker", scale["two"]),
        "",
        f"- Scale-out: two instances serve **{scale['throughput_ratio']:.2f}x** one instance's "
        "throughput at the same CPU per request, until the machine's cores are all busy (the "
        "column above): beyond, more instances need more hosts.",
        f"- Consistency across the two instances: {scale['consistency']['orders_answered_201']} "
        f"orders answered 201, {scale['consistency']['orders_in_database']} in the database "
        "(wrk stops with requests under way), "
        f"{scale['consistency']['order_created_events']} `order.created` events; stock fell by "
        f"{scale['consistency']['stock_fell_by']}, the orders took "
        f"{scale['consistency']['stock_taken_by_those_orders']}. One client's "
        f"{scale['consistency']['rate_limit']['sent']} reads alternating between them were "
        f"answered {scale['consistency']['rate_limit']['answered']} (limit "
        f"{scale['consistency']['rate_limit']['limit']}/minute). The standby, once it had "
        "replayed everything, held "
        f"{'the same' if scale['consistency']['standby']['consistent'] else 'OTHER'} orders, "
        "items, events and stock as the primary.",
        "",
        "Each operation alone (one round):",
        "",
        "| operation | req/s | p50 ms | p99 ms | errors | app CPU-ms/req | primary CPU-ms/req "
        "| replica CPU-ms/req |",
        "|---|---|---|---|---|---|---|---|",
        *(
            f"| {name} | {run['throughput']:,.0f} | {run['latency_ms']['p50']:.1f} | "
            f"{run['latency_ms']['p99']:.1f} | {run['errors']} | {run['app_cpu_ms']:.2f} | "
            f"{run['primary_cpu_ms']:.2f} | {run['replica_cpu_ms']:.2f} |"
            for name, run in results["operations"].items()
        ),
        "",
        count_report(results["operations"]),
        "",
        "Offered load (mix_v3 at a constant rate) against latency, each answer timed from when "
        "it was due; 2xx a second is what clients got done:",
        "",
        "| of saturation | offered req/s | 2xx/s | 503/s | p50 ms (2xx) | p99 ms (2xx) "
        "| p99 ms (every answer) | p99 ms (503) | errors | each worker: connections, cores busy |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for step in results["steps"]:
        ok, every, shed = step["latency_ok_ms"], step["latency_ms"], step["latency_shed_ms"]
        seconds = step["requests"] / max(step["throughput"], 1e-9)
        lines.append(
            f"| {step['fraction']:.2f} | {step['offered_rate']:,.0f} | {step['goodput']:,.0f} "
            f"| {step['statuses'].get(503, 0) / seconds:,.0f} | {ok.get('p50', 0):.1f} "
            f"| {ok.get('p99', 0):.1f} | {every.get('p99', 0):.1f} | {shed.get('p99', 0):.1f} "
            f"| {step['errors']} | {workers_of(step) if step.get('workers') else '-'} |"
        )
    tail = results["list_tail"]
    lines += [
        "",
        f"The v1 list at {LIST_TAIL_FRACTION} of each server's own saturation (as wrk times it):",
        "",
        "| server | offered req/s | p50 ms | p99 ms | errors |",
        "|---|---|---|---|---|",
        *(
            f"| {name} | {run['offered_rate']:,} | {run['p50']:.1f} | {run['p99']:.1f} "
            f"| {run['errors']} |"
            for name, run in tail.items()
        ),
    ]
    lines += pgbouncer_report(results)
    lines += ["", f"Whole run: {results['seconds']:.0f} s.", ""]
    return "\n".join(lines)


def count_report(operations: dict) -> str:
    """v1's list, counted exactly, beside v3's, uncounted: the same page otherwise."""
    counted, uncounted = operations["list"], operations["list_v3"]
    return (
        "The same page of products, counted exactly (v1's default) and not counted (v3's): "
        f"{counted['database_cpu_ms']:.2f} against {uncounted['database_cpu_ms']:.2f} "
        f"PostgreSQL CPU-ms per request (app: {counted['app_cpu_ms']:.2f} against "
        f"{uncounted['app_cpu_ms']:.2f})."
    )


def pgbouncer_report(results: dict) -> list[str]:
    """PgBouncer's own CPU beside PostgreSQL's, for each run that went through it."""
    runs = [("list, shopapi", results["list"]["shopapi"])]
    runs += [("list revalidated, shopapi", results["conditional"])]
    runs += [("mix, shopapi", results["mix"]), ("mix_v3, shopapi", results["mix_v3"])]
    runs += [(f"{name} alone", run) for name, run in results["operations"].items()]
    runs += [("mix, two instances of 1 worker", results["scale_out"]["two"])]
    mix = results["mix"]
    return [
        "",
        "PgBouncer in transaction mode (ops/pgbouncer.ini) between shopapi's workers and "
        "PostgreSQL (primary and replica); the baseline connects directly:",
        "",
        "| run | PostgreSQL CPU-ms/req (primary + replica) | PgBouncer CPU-ms/req "
        "| PgBouncer / PostgreSQL |",
        "|---|---|---|---|",
        *(
            f"| {name} | {run['database_cpu_ms']:.2f} | {run['pgbouncer_cpu_ms']:.3f} | "
            f"{run['pgbouncer_cpu_ms'] / max(run['database_cpu_ms'], 1e-9):.1%} |"
            for name, run in runs
        ),
        "",
        f"- 10,000 req/s of the mix need **{mix['pgbouncer_cpu_ms'] * 10:.1f} cores** of "
        "PgBouncer (on the app hosts), counted in the goals' cores above.",
    ]


if __name__ == "__main__":
    sys.exit(main())
