"""`make bench-replicas`: the load benchmark's mix (bench/load.py) against a PostgreSQL primary with
one hot standby, started like the tests' (shopapi/testing/standby.py), seeded with the bench's data
set. In interleaved rounds: shopapi with the standby taking the reads (DATABASE_REPLICA_URLS),
shopapi on the primary alone, and the plain baseline's list on the primary. The primary's and the
replica's CPU are read separately, each from its own process tree. Results go to
bench/results/replicas.{json,md}.
"""

import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import cpu  # noqa: E402
from bench.load import (  # noqa: E402
    BASELINE_PORT,
    BIN,
    REDIS,
    ROUND_SECONDS,
    ROUNDS,
    WARM_UP_SECONDS,
    Server,
    say,
    seed_both,
    server_secrets,
    write_clients,
    wrk,
)
from shopapi.testing.standby import primary_and_standby  # noqa: E402

RESULTS = ROOT / "bench" / "results"
WITH_REPLICA_PORT, PRIMARY_ONLY_PORT = 8210, 8211
# The fast test clusters' settings, with the default buffers: the data set is about 100 MB.
SETTINGS = "shared_buffers = 128MB\n"


def replica_server(name, port, primary_url, replica_url, secrets_env, log_dir) -> Server:
    """The production server as bench/load.py starts it, on this primary (and replica)."""
    env = {
        **os.environ,
        **secrets_env,
        "BIND": f"127.0.0.1:{port}",
        "WEB_CONCURRENCY": str(os.cpu_count()),
        "DATABASE_URL": primary_url,
        "SHARED_STORE_URL": REDIS,
        "PROMETHEUS_MULTIPROC_DIR": tempfile.mkdtemp(prefix=f"{name}-metrics-", dir=log_dir),
    }
    if replica_url:
        env["DATABASE_REPLICA_URLS"] = replica_url
    env.pop("RATE_LIMIT_SCALE", None)
    argv = [str(BIN / "gunicorn"), "-c", "ops/gunicorn.conf.py", "app:create_app()"]
    return Server(name, argv, env, port, log_dir)


def baseline_on(primary_url: str, log_dir) -> Server:
    argv = [str(BIN / "gunicorn"), "-w", "2", "-b", f"127.0.0.1:{BASELINE_PORT}"]
    argv.append("bench.baseline_app:create_app()")
    env = {**os.environ, "BENCH_DATABASE_URL": primary_url}
    return Server("baseline", argv, env, BASELINE_PORT, log_dir)


def measured(server: Server, data, mix: str, seconds: float, replication) -> dict:
    """A wrk run, with the CPU per request of the primary and of the replica, each its own."""
    clusters = {"primary": replication.primary, "replica": replication.standby}
    before = {name: cpu.tree_seconds(c.postmaster_pid()) for name, c in clusters.items()}
    run = wrk([server], data, mix, seconds)
    requests = max(run["requests"], 1)
    for name, cluster in clusters.items():
        used = cpu.tree_seconds(cluster.postmaster_pid()) - before[name]
        run[f"{name}_cpu_ms"] = used * 1000 / requests
    return run


KEYS = ("throughput", "app_cpu_ms", "primary_cpu_ms", "replica_cpu_ms")


def summary(runs: list[dict]) -> dict:
    medians = {key: statistics.median(run[key] for run in runs) for key in KEYS}
    medians["p99_ms"] = statistics.median(run["latency_ms"]["p99"] for run in runs)
    medians["errors"] = sum(run["errors"] for run in runs)
    return medians


def line(label: str, run: dict) -> str:
    return (
        f"{label}: {run['throughput']:6.0f} req/s  app {run['app_cpu_ms']:.2f}  primary "
        f"{run['primary_cpu_ms']:.2f}  replica {run['replica_cpu_ms']:.2f} CPU-ms/req  "
        f"errors {run['errors']}"
    )


def main() -> int:
    started = time.monotonic()
    secrets_env, tokens = server_secrets()
    with (
        primary_and_standby(SETTINGS) as replication,
        tempfile.TemporaryDirectory(prefix="shopapi-bench-replicas-") as scratch,
    ):
        scratch = pathlib.Path(scratch)
        primary, replica = replication.primary.url, replication.standby.url
        seed_both(replication)
        say(f"primary and standby seeded in {time.monotonic() - started:.0f} s")
        data = scratch / "clients.lua"
        write_clients(data, tokens)
        servers = {
            "baseline list": ("list", baseline_on(primary, scratch)),
            "mix, reads on the replica": (
                "mix",
                replica_server(
                    "replicas", WITH_REPLICA_PORT, primary, replica, secrets_env, scratch
                ),
            ),
            "mix, primary only": (
                "mix",
                replica_server("primary", PRIMARY_ONLY_PORT, primary, None, secrets_env, scratch),
            ),
        }
        try:
            for mix, server in servers.values():
                wrk([server], data, mix, WARM_UP_SECONDS)
            runs: dict[str, list] = {label: [] for label in servers}
            for _ in range(ROUNDS):
                for label, (mix, server) in servers.items():
                    runs[label].append(measured(server, data, mix, ROUND_SECONDS, replication))
                    say(line(f"  {label:26s}", runs[label][-1]))
        finally:
            for _, server in servers.values():
                server.stop()
    results = {label: {**summary(rounds), "rounds": rounds} for label, rounds in runs.items()}
    results["seconds"] = time.monotonic() - started
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "replicas.json").write_text(json.dumps(results, indent=2) + "\n")
    report = markdown(results)
    (RESULTS / "replicas.md").write_text(report)
    print("\n" + report)
    errors = sum(results[label]["errors"] for label in runs)
    if errors:
        print(f"FAILED: {errors} requests failed (see replicas.json)", file=sys.stderr)
    return 1 if errors else 0


def markdown(results: dict) -> str:
    baseline = results["baseline list"]
    rows = [
        "| | req/s | p99 ms | app CPU-ms/req | primary CPU-ms/req | replica CPU-ms/req | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for label in ("baseline list", "mix, primary only", "mix, reads on the replica"):
        s = results[label]
        rows.append(
            f"| {label} | {s['throughput']:,.0f} | {s['p99_ms']:.1f} | {s['app_cpu_ms']:.2f} | "
            f"{s['primary_cpu_ms']:.2f} | {s['replica_cpu_ms']:.2f} | {s['errors']} |"
        )
    with_replica, alone = results["mix, reads on the replica"], results["mix, primary only"]
    ratio = with_replica["primary_cpu_ms"] / baseline["primary_cpu_ms"]
    ratio_alone = alone["primary_cpu_ms"] / baseline["primary_cpu_ms"]
    return "\n".join(
        [
            "# The mix with one read replica (`make bench-replicas`)",
            "",
            f"{time.strftime('%Y-%m-%d', time.gmtime())}, {os.cpu_count()} cores; medians of "
            f"{ROUNDS} interleaved rounds of {ROUND_SECONDS} s per row; one primary and one hot "
            "standby on this machine (shopapi/testing/standby.py), the bench's data set.",
            "",
            *rows,
            "",
            f"- Primary CPU per mix request against the baseline list's: **{ratio:.2f}x** "
            f"with the replica taking the reads, {ratio_alone:.2f}x on the primary alone "
            "(issue 20's goal: at most 0.35x).",
            "",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
