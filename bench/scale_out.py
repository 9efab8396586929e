"""`make bench-hosts`, the load benchmark's scale-out mode: N app hosts (each `make serve-prod`
with one worker) in network namespaces behind HAProxy, as tests/test_scale_out.py runs them
(shopapi/testing/hosts.py), sharing PostgreSQL and Redis. wrk drives the mix (bench/mix.lua)
through the balancer with 1, 2, ... N hosts in rotation (the others set to maintenance through
HAProxy's runtime API), in interleaved rounds: throughput per added host, with its CPU.

    BENCH_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/shopapi_bench \
        python bench/scale_out.py --hosts 3
"""

import argparse
import contextlib
import json
import os
import pathlib
import platform
import shutil
import socket
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import cpu  # noqa: E402
from bench.load import (  # noqa: E402
    REDIS,
    RESULTS,
    ROUND_SECONDS,
    ROUNDS,
    WARM_UP_SECONDS,
    _line,
    medians,
    say,
    server_secrets,
    write_clients,
    wrk,
)
from bench.seed import URL, reset, seed  # noqa: E402
from shopapi.testing.hosts import BALANCER_PORT, Hosts, unavailable_reason  # noqa: E402


class Balanced:
    """What bench.load.wrk drives: the balancer's address, and the CPU of every app host and
    of the balancer (HAProxy) together."""

    port = BALANCER_PORT

    def __init__(self, hosts: Hosts):
        self.hosts = hosts
        self.host = str(hosts.balancer_address)

    def cpu_seconds(self, kernel: bool = False) -> float:
        pids = [self.hosts.processes[name].pid for name in [*self.hosts.names, "balancer"]]
        return sum(cpu.tree_seconds(pid, kernel) for pid in pids)

    def in_rotation(self, count: int) -> None:
        """Only the first `count` hosts receive requests; the others are in maintenance."""
        for index, name in enumerate(self.hosts.names):
            state = "ready" if index < count else "maint"
            with socket.socket(socket.AF_UNIX) as connection:
                connection.connect(str(self.hosts.socket_path))
                connection.sendall(f"set server app_hosts/{name} state {state}\n".encode())
                connection.recv(65536)
        for name in self.hosts.names[:count]:
            self.hosts.wait_for_state(name, "UP")


def measure(hosts: Hosts, data: pathlib.Path, count: int) -> dict:
    balanced = Balanced(hosts)
    balanced.in_rotation(count)
    return wrk([balanced], data, "mix", ROUND_SECONDS)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=3)
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason or shutil.which("wrk") is None:
        raise SystemExit(f"cannot run: {reason or 'wrk is not installed (Debian: wrk)'}")
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    seed(URL)
    reset(URL)
    secrets_env, tokens = server_secrets()
    env = {**secrets_env, "DRAIN_SECONDS": "0"}
    runs: dict[int, list] = {count: [] for count in range(1, args.hosts + 1)}
    with tempfile.TemporaryDirectory(prefix="shopapi-bench-hosts-") as scratch:
        scratch = pathlib.Path(scratch)
        data = scratch / "clients.lua"
        write_clients(data, tokens)
        with contextlib.ExitStack() as stack:
            os.environ.pop("RATE_LIMIT_SCALE", None)  # the spec's real limits
            hosts = stack.enter_context(Hosts(args.hosts, URL, REDIS, env, scratch))
            say(f"{args.hosts} hosts behind HAProxy, 1 worker each, up")
            balanced = Balanced(hosts)
            wrk([balanced], data, "mix", WARM_UP_SECONDS)
            for _ in range(ROUNDS):
                for count in runs:
                    runs[count].append(measure(hosts, data, count))
                    say(_line(f"  {count} host(s)", runs[count][-1]))
    summary = {count: medians(rounds) for count, rounds in runs.items()}
    results = {
        "machine": {"cores": os.cpu_count(), "python": platform.python_version()},
        "hosts": args.hosts,
        "summary": summary,
        "rounds": runs,
        "seconds": time.monotonic() - started,
        "load_average": {"before": load_before, "after": os.getloadavg()[0]},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "scale-out.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    report = markdown(summary, results["load_average"])
    (RESULTS / "scale-out.md").write_text(report)
    print("\n" + report)
    errors = sum(run["errors"] for run in summary.values())
    return 1 if errors else 0


def markdown(summary: dict, load_average: dict) -> str:
    one = summary[1]["throughput"]
    lines = [
        "# Scale-out behind HAProxy (`make bench-hosts`)",
        "",
        f"Measured {time.strftime('%Y-%m-%d')} on this machine ({os.cpu_count()} cores, shared "
        "with PostgreSQL, Redis, HAProxy and wrk). The mix through the balancer, each host a "
        "network namespace running `make serve-prod` with one worker; medians of interleaved "
        f"{ROUND_SECONDS} s rounds. App CPU counts every host and HAProxy; PostgreSQL CPU every "
        "postgres process on the machine, other work's included.",
        "",
        f"The machine's load average was {load_average['before']:.1f} before the run and "
        f"{load_average['after']:.1f} after it. One host is one worker, at most one core; on two "
        "cores shared with PostgreSQL and wrk a second host can add at most what the first "
        "left idle, and a third nothing. Beside other work (a load average above the cores), "
        "more hosts win a larger share of the CPU from it: that share, not capacity, is what "
        "they add then. On hosts of their own, each brings its cores.",
        "",
        "| hosts | req/s | vs one host | added by the last host | p50 ms | p99 ms | app CPU-ms/req "
        "| PostgreSQL CPU-ms/req | errors |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    previous = None
    for count, run in summary.items():
        added = "" if previous is None else f"{run['throughput'] - previous:+.0f} req/s"
        lines.append(
            f"| {count} | {run['throughput']:.0f} | {run['throughput'] / one:.2f}x | {added} "
            f"| {run['latency_ms']['p50']:.1f} | {run['latency_ms']['p99']:.1f} "
            f"| {run['app_cpu_ms']:.2f} | {run['database_cpu_ms']:.2f} | {run['errors']} |"
        )
        previous = run["throughput"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
