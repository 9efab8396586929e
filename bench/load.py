"""The load benchmark (`make bench`): shopapi's production server under wrk, on the seeded data set
in PostgreSQL, against a plain Flask + Peewee baseline measured in the same run.

1. list: the mix's list query (`category` filter, `-price_cents` sort), baseline and shopapi in
   interleaved rounds under the same load; CPU per request and the ratio between them.
2. mix: list products 40 %, get a product 30 %, list my orders 15 %, place an order 10 %,
   patch a product 5 % (bench/mix.lua), each client with its own valid token; then each of the
   five alone, for its own cost (reads and writes size the database differently).
3. steps: the mix at a constant offered rate, stepped up past saturation: latency percentiles
   against offered load (plotted).
4. scale-out: one instance against two (separate servers on separate ports, as if on two hosts,
   sharing PostgreSQL and Redis, round-robin from the load generator); then checks that the data
   and the rate limits stayed consistent across the two.

shopapi's servers reach PostgreSQL through PgBouncer in transaction mode (ops/pgbouncer.ini), as
production's hosts do; the baseline, the plain stack, connects directly.

CPU is read from /proc: the server's processes (master and workers), every PostgreSQL process
and PgBouncer, separately. Results go to bench/results/load.{json,md,png}.

    BENCH_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/shopapi_bench python bench/load.py
"""

import atexit
import contextlib
import http.client
import json
import os
import pathlib
import platform
import resource
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from peewee import fn

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import cpu, plot  # noqa: E402
from bench.seed import PRODUCTS, URL, reset, seed  # noqa: E402
from models import Order, OrderItem, Product, User  # noqa: E402
from models.db import database  # noqa: E402
from models.event import Event  # noqa: E402
from models.user import ROLE_SCOPES  # noqa: E402
from shopapi.auth.tokens import AccessTokens  # noqa: E402
from shopapi.settings import Settings  # noqa: E402
from tests.support.pgbouncer import PgBouncer  # noqa: E402

RESULTS = ROOT / "bench" / "results"
BIN = pathlib.Path(sys.executable).parent
REDIS = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
SHOPAPI_PORT, BASELINE_PORT, SCALE_OUT_PORTS = 8200, 8201, (8202, 8203)
# The load: connections kept open by wrk's two threads, seconds per measured round.
CONNECTIONS, THREADS = 32, 2
ROUNDS, ROUND_SECONDS, WARM_UP_SECONDS = 3, 10, 3
OPERATION_SECONDS, STEP_SECONDS = 5, 6
OPERATIONS = ("list", "get", "orders", "create", "patch")  # bench/mix.lua's names
STEP_FRACTIONS = (0.2, 0.4, 0.6, 0.8, 0.9, 1.0, 1.1, 1.25)  # of the mix's saturated throughput
# wrk stops with requests under way; the servers finish them within this, before the database is
# read for the consistency checks (an order committing meanwhile would be half counted).
SETTLE_SECONDS = 2
PARTNERS = 100  # tokens that may patch products; every seeded user is a customer
CATEGORIES = ("books", "kitchen", "garden", "toys")


# shopapi's servers connect through it (main() starts it); None: straight to PostgreSQL.
PGBOUNCER: PgBouncer | None = None


def start_pgbouncer() -> PgBouncer:
    """PgBouncer in transaction mode in front of the bench database's server, configured as
    ops/pgbouncer.ini says (stopped when the bench exits)."""
    global PGBOUNCER
    PGBOUNCER = PgBouncer(URL)
    atexit.register(PGBOUNCER.stop)
    return PGBOUNCER


def pgbouncer_seconds() -> float:
    """CPU seconds PgBouncer used so far (0 without one)."""
    return cpu.tree_seconds(PGBOUNCER.pid) if PGBOUNCER else 0.0


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


class Server:
    """A server process group started for the benchmark, stopped with SIGTERM."""

    host = "127.0.0.1"

    def __init__(self, name: str, argv: list[str], env: dict, port: int, log_dir: pathlib.Path):
        self.name, self.port = name, port
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

    def cpu_seconds(self) -> float:
        return cpu.tree_seconds(self.process.pid)

    def stop(self) -> None:
        """Stop the server (once; stopping a stopped server does nothing)."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=30)
        self.log.close()


def server_secrets() -> tuple[dict, AccessTokens]:
    """The secrets every server of a run shares, as hosts would (environment variables), and the
    issuer of the clients' tokens that they trust."""
    env = {"JWT_SECRET": secrets.token_urlsafe(32), "CURSOR_SECRET": secrets.token_urlsafe(32)}
    tokens = AccessTokens(Settings(jwt_secret=env["JWT_SECRET"].encode(), access_token_ttl=3600))
    return env, tokens


def shopapi_server(name, port, workers, secrets_env, log_dir) -> Server:
    """The production server as `make serve-prod` starts it, every feature on."""
    env = {
        **os.environ,
        **secrets_env,
        "BIND": f"127.0.0.1:{port}",
        "WEB_CONCURRENCY": str(workers),
        "DATABASE_URL": PGBOUNCER.url(URL) if PGBOUNCER else URL,
        "RATELIMIT_STORAGE_URI": REDIS,
        "PROMETHEUS_MULTIPROC_DIR": tempfile.mkdtemp(prefix=f"{name}-metrics-", dir=log_dir),
    }
    env.pop("RATE_LIMIT_SCALE", None)  # the spec's real limits
    argv = [str(BIN / "gunicorn"), "-c", "ops/gunicorn.conf.py", "app:create_app()"]
    return Server(name, argv, env, port, log_dir)


def baseline_server(log_dir) -> Server:
    argv = [str(BIN / "gunicorn"), "-w", "2", "-b", f"127.0.0.1:{BASELINE_PORT}"]
    argv.append("bench.baseline_app:create_app()")
    return Server(
        "baseline", argv, {**os.environ, "BENCH_DATABASE_URL": URL}, BASELINE_PORT, log_dir
    )


def wrk(
    servers: list[Server], data: pathlib.Path, mix: str, seconds: float, rate: float = 0
) -> dict:
    """One wrk run against `servers` (round-robin), with the CPU each side used meanwhile."""
    env = {
        **os.environ,
        "BENCH_DATA": str(data),
        "BENCH_MIX": mix,
        "BENCH_RATE": str(rate / THREADS),
        "BENCH_ADDRS": ",".join(f"{server.host}:{server.port}" for server in servers),
    }
    url = f"http://{servers[0].host}:{servers[0].port}"
    argv = ["wrk", f"-t{THREADS}", f"-c{CONNECTIONS}", f"-d{seconds}s", "-s", "bench/mix.lua", url]
    app_before = sum(server.cpu_seconds() for server in servers)
    database_before = cpu.program_seconds("postgres")
    pgbouncer_before = pgbouncer_seconds()
    load_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    finished = subprocess.run(  # noqa: S603 (wrk, our arguments)
        argv, cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    load_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    database_seconds = cpu.program_seconds("postgres") - database_before
    pgbouncer_cpu_seconds = pgbouncer_seconds() - pgbouncer_before
    app_seconds = sum(server.cpu_seconds() for server in servers) - app_before
    load_seconds = sum(
        getattr(load_after, field) - getattr(load_before, field)
        for field in ("ru_utime", "ru_stime")
    )
    run = _parse(finished.stdout)
    requests = max(run["requests"], 1)
    return {
        "mix": mix,
        "offered_rate": rate or None,
        "requests": run["requests"],
        "throughput": run["requests"] / (run["duration_us"] / 1e6),
        "latency_ms": {p: run[f"latency_{p}_us"] / 1000 for p in ("p50", "p90", "p95", "p99")},
        "errors": int(
            sum(run[f"errors_{kind}"] for kind in ("connect", "read", "write", "timeout"))
        )
        + sum(count for status, count in run["statuses"].items() if status >= 400),
        "statuses": run["statuses"],
        "error_bodies": run["error_bodies"],
        "app_cpu_ms": app_seconds * 1000 / requests,
        "database_cpu_ms": database_seconds * 1000 / requests,
        "pgbouncer_cpu_ms": pgbouncer_cpu_seconds * 1000 / requests,
        "load_generator_cpu_ms": load_seconds * 1000 / requests,
    }


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
    keys = ("throughput", "app_cpu_ms", "database_cpu_ms", "load_generator_cpu_ms")
    keys += ("pgbouncer_cpu_ms",)
    summary = {key: statistics.median(run[key] for run in runs) for key in keys}
    summary["latency_ms"] = {
        p: statistics.median(run["latency_ms"][p] for run in runs) for p in runs[0]["latency_ms"]
    }
    summary["errors"] = sum(run["errors"] for run in runs)
    summary["requests"] = sum(run["requests"] for run in runs)
    return summary


def say(message: str) -> None:
    print(message, flush=True)


def compare_list(baseline: Server, shopapi: Server, data) -> dict:
    say(f"list: baseline and shopapi, {ROUNDS} interleaved rounds of {ROUND_SECONDS} s")
    for server in (baseline, shopapi):
        wrk([server], data, "list", WARM_UP_SECONDS)
    runs = {"baseline": [], "shopapi": []}
    for _ in range(ROUNDS):
        for name, server in (("baseline", baseline), ("shopapi", shopapi)):
            runs[name].append(wrk([server], data, "list", ROUND_SECONDS))
            say(_line(f"  {name}", runs[name][-1]))
    summary = {name: medians(rounds) for name, rounds in runs.items()}
    summary["app_cpu_ratio"] = summary["shopapi"]["app_cpu_ms"] / summary["baseline"]["app_cpu_ms"]
    summary["rounds"] = runs
    return summary


def measure_mix(shopapi: Server, data) -> dict:
    say(f"mix: {ROUNDS} rounds of {ROUND_SECONDS} s")
    wrk([shopapi], data, "mix", WARM_UP_SECONDS)
    rounds = [wrk([shopapi], data, "mix", ROUND_SECONDS) for _ in range(ROUNDS)]
    for run in rounds:
        say(_line("  shopapi", run))
    return {**medians(rounds), "rounds": rounds}


def measure_operations(shopapi: Server, data) -> dict:
    say(f"operations: each alone, {OPERATION_SECONDS} s")
    costs = {}
    for operation in OPERATIONS:
        wrk([shopapi], data, operation, 1)
        costs[operation] = wrk([shopapi], data, operation, OPERATION_SECONDS)
        say(_line(f"  {operation:7s}", costs[operation]))
    return costs


def step_load(shopapi: Server, data, saturated: float) -> list[dict]:
    say(f"steps: the mix at a constant rate, {STEP_SECONDS} s a step")
    steps = []
    for fraction in STEP_FRACTIONS:
        rate = round(saturated * fraction)
        steps.append(wrk([shopapi], data, "mix", STEP_SECONDS, rate=rate))
        say(_line(f"  offered {rate:5d}/s", steps[-1]))
    return steps


def scale_out(data, secrets_env, tokens: AccessTokens, log_dir) -> dict:
    """One instance against two, each a single worker, in interleaved rounds."""
    say("scale-out: one instance (1 worker) against two (1 worker each), round-robin")
    first, second = (
        shopapi_server(f"instance-{port}", port, 1, secrets_env, log_dir)
        for port in SCALE_OUT_PORTS
    )
    try:
        wrk([first, second], data, "mix", WARM_UP_SECONDS)
        runs = {"one": [], "two": []}
        for _ in range(ROUNDS - 1):
            runs["one"].append(wrk([first], data, "mix", ROUND_SECONDS))
            say(_line("  one instance ", runs["one"][-1]))
            time.sleep(SETTLE_SECONDS)
            before = _stock_and_orders()
            runs["two"].append(wrk([first, second], data, "mix", ROUND_SECONDS))
            say(_line("  two instances", runs["two"][-1]))
        time.sleep(SETTLE_SECONDS)
        consistency = _data_consistency(before, runs["two"][-1])
        consistency["rate_limit"] = _rate_limit_across([first, second], tokens)
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
        "consistent": created <= placed <= created + CONNECTIONS
        and placed == events
        and taken == stock_fell,
    }


def _rate_limit_across(servers: list[Server], tokens: AccessTokens) -> dict:
    """One client's requests alternately to each instance: the shared limit (the spec's
    1000/minute for a product read) lets exactly that many through, wherever they land."""
    limit, extra = 1000, 20
    token = tokens.issue(f"limit-probe-{secrets.token_hex(4)}", ["products:read"])
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
        f"p99 {latency['p99']:7.1f} ms  app {run['app_cpu_ms']:.2f} + db "
        f"{run['database_cpu_ms']:.2f} (+ pgbouncer {run['pgbouncer_cpu_ms']:.2f}) CPU-ms/req  "
        f"errors {run['errors']}"
    )


def main() -> int:
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")
    started = time.monotonic()
    seeded = seed(URL)
    reset(URL)
    say(f"data set {'seeded' if seeded else 'ready'} in {time.monotonic() - started:.0f} s")
    secrets_env, tokens = server_secrets()
    start_pgbouncer()
    results: dict = {
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "kernel": platform.release(),
        },
        "load": {
            "connections": CONNECTIONS,
            "wrk_threads": THREADS,
            "round_seconds": ROUND_SECONDS,
        },
    }
    with tempfile.TemporaryDirectory(prefix="shopapi-bench-") as scratch:
        scratch = pathlib.Path(scratch)
        data = scratch / "clients.lua"
        write_clients(data, tokens)
        shopapi = shopapi_server("shopapi", SHOPAPI_PORT, os.cpu_count(), secrets_env, scratch)
        baseline = baseline_server(scratch)
        try:
            results["list"] = compare_list(baseline, shopapi, data)
            baseline.stop()
            results["mix"] = measure_mix(shopapi, data)
            results["operations"] = measure_operations(shopapi, data)
            results["steps"] = step_load(shopapi, data, results["mix"]["throughput"])
        finally:
            shopapi.stop()
            baseline.stop()
        results["scale_out"] = scale_out(data, secrets_env, tokens, scratch)
    results["seconds"] = time.monotonic() - started
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "load.json").write_text(json.dumps(results, indent=2) + "\n")
    report = markdown(results)
    (RESULTS / "load.md").write_text(report)
    plot.latency_against_load(results["steps"], RESULTS / "load.png")
    print("\n" + report)
    failures = _failures(results)
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


def _failures(results: dict) -> list[str]:
    failures = []
    saturated = [results["list"]["baseline"], results["list"]["shopapi"], results["mix"]]
    saturated += [results["scale_out"]["one"], results["scale_out"]["two"]]
    errors = sum(summary["errors"] for summary in saturated)
    errors += sum(step["errors"] for step in results["steps"])
    errors += sum(run["errors"] for run in results["operations"].values())
    if errors:
        failures.append(f"{errors} requests failed (see statuses and error_bodies in load.json)")
    consistency = results["scale_out"]["consistency"]
    if not consistency["consistent"]:
        failures.append(f"data differs across instances: {consistency}")
    if not consistency["rate_limit"]["consistent"]:
        failures.append(f"rate limit not shared: {consistency['rate_limit']}")
    return failures


def markdown(results: dict) -> str:
    listed, mix, scale = results["list"], results["mix"], results["scale_out"]

    def row(label, summary):
        latency = summary["latency_ms"]
        server_ms = summary["app_cpu_ms"] + summary["database_cpu_ms"]
        busy = (server_ms + summary["load_generator_cpu_ms"]) * summary["throughput"] / 1000
        return (
            f"| {label} | {summary['throughput']:,.0f} | {latency['p50']:.1f} | "
            f"{latency['p95']:.1f} | {latency['p99']:.1f} | {summary['errors']} | "
            f"{summary['app_cpu_ms']:.2f} | {summary['database_cpu_ms']:.2f} | "
            f"{busy:.1f} | {server_ms * 10:.0f} |"
        )

    machine = results["machine"]
    lines = [
        f"# Load benchmark ({machine['cores']} cores, Python {machine['python']}; wrk, "
        f"{results['load']['connections']} connections; medians of the rounds)",
        "",
        "| run | req/s | p50 ms | p95 ms | p99 ms | errors | app CPU-ms/req "
        "| PostgreSQL CPU-ms/req | cores busy (all: app, database, wrk) "
        "| server cores for 10,000 req/s |",
        "|---|---|---|---|---|---|---|---|---|---|",
        row("list, plain Flask + Peewee baseline", listed["baseline"]),
        row("list, shopapi", listed["shopapi"]),
        row("mix, shopapi", mix),
        row("mix, one instance of 1 worker", scale["one"]),
        row("mix, two instances of 1 worker", scale["two"]),
        "",
        f"- List: shopapi's app CPU per request is **{listed['app_cpu_ratio']:.2f}x** the "
        "baseline's (goal: at most 2x).",
        f"- Mix: **{mix['app_cpu_ms']:.2f} ms** of app CPU per request (goal: at most 1.0 ms). "
        f"10,000 requests/s of it need **{mix['app_cpu_ms'] * 10:.0f} cores** of app workers and "
        f"**{mix['database_cpu_ms'] * 10:.0f} cores** of PostgreSQL, at 100 % busy.",
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
        f"{scale['consistency']['rate_limit']['limit']}/minute).",
        "",
        "Each operation alone (one round):",
        "",
        "| operation | req/s | p50 ms | p99 ms | errors | app CPU-ms/req | PostgreSQL CPU-ms/req |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {name} | {run['throughput']:,.0f} | {run['latency_ms']['p50']:.1f} | "
            f"{run['latency_ms']['p99']:.1f} | {run['errors']} | {run['app_cpu_ms']:.2f} | "
            f"{run['database_cpu_ms']:.2f} |"
            for name, run in results["operations"].items()
        ),
        "",
        "Offered load (the mix at a constant rate) against latency:",
        "",
        "| offered req/s | served req/s | p50 ms | p95 ms | p99 ms | errors |",
        "|---|---|---|---|---|---|",
    ]
    for step in results["steps"]:
        latency = step["latency_ms"]
        lines.append(
            f"| {step['offered_rate']:,.0f} | {step['throughput']:,.0f} | {latency['p50']:.1f} | "
            f"{latency['p95']:.1f} | {latency['p99']:.1f} | {step['errors']} |"
        )
    lines += pgbouncer_report(results)
    lines += ["", f"Whole run: {results['seconds']:.0f} s.", ""]
    return "\n".join(lines)


def pgbouncer_report(results: dict) -> list[str]:
    """PgBouncer's own CPU beside PostgreSQL's, for each run that went through it."""
    runs = [("list, shopapi", results["list"]["shopapi"]), ("mix, shopapi", results["mix"])]
    runs += [(f"{name} alone", run) for name, run in results["operations"].items()]
    runs += [("mix, two instances of 1 worker", results["scale_out"]["two"])]
    mix = results["mix"]
    return [
        "",
        "PgBouncer in transaction mode (ops/pgbouncer.ini) between shopapi's workers and "
        "PostgreSQL; the baseline connects directly:",
        "",
        "| run | PostgreSQL CPU-ms/req | PgBouncer CPU-ms/req | PgBouncer / PostgreSQL |",
        "|---|---|---|---|",
        *(
            f"| {name} | {run['database_cpu_ms']:.2f} | {run['pgbouncer_cpu_ms']:.3f} | "
            f"{run['pgbouncer_cpu_ms'] / max(run['database_cpu_ms'], 1e-9):.1%} |"
            for name, run in runs
        ),
        "",
        f"- 10,000 req/s of the mix need **{mix['pgbouncer_cpu_ms'] * 10:.1f} cores** of "
        "PgBouncer (on the app hosts), beside the app's and PostgreSQL's above.",
    ]


if __name__ == "__main__":
    sys.exit(main())
