"""What PgBouncer in transaction mode costs a request: shopapi straight to PostgreSQL (A) against
shopapi through PgBouncer (B), two workers each, the mix in interleaved rounds of one run
(bench/load.py's servers and wrk). Writes bench/results/pgbouncer-ab.md. `make bench-pgbouncer`;
BENCH_DATABASE_URL as for bench/load.py.
"""

import json
import pathlib
import socket
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import load  # noqa: E402
from bench.seed import URL, reset, seed  # noqa: E402

ROUNDS = 5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    seed(URL)
    reset(URL)
    secrets_env, tokens = load.server_secrets()
    with tempfile.TemporaryDirectory(prefix="shopapi-pgbouncer-ab-") as scratch:
        scratch = pathlib.Path(scratch)
        data = scratch / "clients.lua"
        load.write_clients(data, tokens)
        direct = load.shopapi_server("direct", free_port(), 2, secrets_env, scratch)
        load.start_pgbouncer()  # shopapi_server() connects through it from here on
        pooled = load.shopapi_server("pgbouncer", free_port(), 2, secrets_env, scratch)
        runs = {"direct": [], "pgbouncer": []}
        try:
            for server in (direct, pooled):
                load.wrk([server], data, "mix", load.WARM_UP_SECONDS)
            for _ in range(ROUNDS):
                for name, server in (("direct", direct), ("pgbouncer", pooled)):
                    runs[name].append(load.wrk([server], data, "mix", load.ROUND_SECONDS))
                    load.say(load._line(f"  {name:9s}", runs[name][-1]))
        finally:
            direct.stop()
            pooled.stop()
    summary = {name: load.medians(rounds) for name, rounds in runs.items()}
    for name, rounds in runs.items():
        summary[name]["statuses"] = _sum_statuses(rounds)
    summary["rounds"] = runs
    (load.RESULTS / "pgbouncer-ab.json").write_text(json.dumps(summary, indent=2) + "\n")
    report = markdown(summary)
    (load.RESULTS / "pgbouncer-ab.md").write_text(report)
    print("\n" + report)
    return 1 if any(summary[name]["errors"] for name in runs) else 0


def _sum_statuses(rounds: list[dict]) -> dict[int, int]:
    statuses: dict[int, int] = {}
    for run in rounds:
        for status, count in run["statuses"].items():
            statuses[status] = statuses.get(status, 0) + count
    return statuses


def markdown(summary: dict) -> str:
    a, b = summary["direct"], summary["pgbouncer"]
    lines = [
        f"# PgBouncer A/B: the mix, shopapi (2 workers) direct against through PgBouncer "
        f"(transaction mode, ops/pgbouncer.ini); medians of {ROUNDS} interleaved rounds of "
        f"{load.ROUND_SECONDS} s, {time.strftime('%Y-%m-%d')}",
        "",
        "| | req/s | p50 ms | p99 ms | errors | app CPU-ms/req | PostgreSQL CPU-ms/req "
        "| PgBouncer CPU-ms/req | statuses (all rounds) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, run in (("direct", a), ("through PgBouncer", b)):
        lines.append(
            f"| {name} | {run['throughput']:,.0f} | {run['latency_ms']['p50']:.1f} | "
            f"{run['latency_ms']['p99']:.1f} | {run['errors']} | {run['app_cpu_ms']:.2f} | "
            f"{run['database_cpu_ms']:.2f} | {run['pgbouncer_cpu_ms']:.3f} | "
            f"{dict(sorted(run['statuses'].items()))} |"
        )
    lines += [
        "",
        "Errors are the sum over the rounds: answers of 400 or more, and wrk's socket errors and "
        "timeouts (2 s; the requests the statuses do not count).",
        "",
        f"- app CPU through PgBouncer / direct: **{b['app_cpu_ms'] / a['app_cpu_ms']:.2f}x**",
        f"- PgBouncer's own CPU: **{b['pgbouncer_cpu_ms']:.3f} ms** a request, "
        f"{b['pgbouncer_cpu_ms'] / b['app_cpu_ms']:.1%} of the app's",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
