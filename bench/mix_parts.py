"""The mix against its parts (`make bench-mix-parts`, about 7 minutes): does a request cost more
in the mix than alone? One production server (every feature on, Redis rate limits) against one
PostgreSQL, no standby: each mix of bench/mix.lua (`mix`, `mix_v3`) in rounds interleaved with
each of its operations alone, under the same wrk load; the app's and PostgreSQL's CPU per
request (/proc) of the mix beside its operations' weighted by the mix's shares. Writes
bench/results/mix-parts.md.

    BENCH_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/shopapi_bench python bench/mix_parts.py

MIX_PARTS_WORKERS (2: one per core) sets the server's workers; MIX_PARTS_ROUNDS (3), the rounds.
"""

import os
import pathlib
import re
import statistics
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import load  # noqa: E402
from bench.seed import URL, reset, seed  # noqa: E402

WORKERS = int(os.environ.get("MIX_PARTS_WORKERS", 2))
ROUNDS = int(os.environ.get("MIX_PARTS_ROUNDS", 3))
MIXES = {"mix": "", "mix_v3": "_v3"}


def shares() -> dict[str, float]:
    """Each operation's share of the mix, read from bench/mix.lua's cumulative percentages."""
    table = re.search(r"local MIX = \{(.*)\}\n", (ROOT / "bench" / "mix.lua").read_text())
    cumulative = [(int(n), name) for n, name in re.findall(r'\{(\d+), "(\w+)"\}', table[1])]
    previous, parts = 0, {}
    for percent, name in cumulative:
        parts[name] = (percent - previous) / 100
        previous = percent
    return parts


def _medians(runs: dict[str, list[dict]], key: str) -> dict[str, float]:
    return {name: statistics.median(run[key] for run in rs) for name, rs in runs.items()}


def main() -> None:
    quiet_before = os.getloadavg()[0]
    seed(URL)
    reset(URL)
    secrets_env, tokens = load.server_secrets()
    parts = shares()
    runs: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="shopapi-mix-parts-") as scratch:
        scratch = pathlib.Path(scratch)
        data = scratch / "clients.lua"
        load.write_clients(data, tokens)
        server = load.shopapi_server("parts", load.SHOPAPI_PORT, WORKERS, secrets_env, scratch)
        try:
            load.wrk([server], data, "mix", load.WARM_UP_SECONDS)
            for round_number in range(ROUNDS):
                for mix, suffix in MIXES.items():
                    for name in [mix, *(part + suffix for part in parts)]:
                        run = load.wrk([server], data, name, load.ROUND_SECONDS)
                        runs.setdefault(name, []).append(run)
                        load.say(
                            f"round {round_number + 1} {name:10s} {run['throughput']:5.0f} "
                            f"req/s, app {run['app_cpu_ms']:.2f} CPU-ms/req, "
                            f"errors {run['errors']}"
                        )
        finally:
            server.stop()
    app_ms = _medians(runs, "app_cpu_ms")
    database_ms = _medians(runs, "database_cpu_ms")
    errors = sum(r["errors"] for rs in runs.values() for r in rs)
    lines = [
        "# The mix against its parts",
        "",
        f"One production server of {WORKERS} worker(s), every feature on, Redis rate limits, "
        f"against one PostgreSQL (no standby, no PgBouncer); wrk, {load.CONNECTIONS} "
        f"connections; medians of {ROUNDS} interleaved rounds of {load.ROUND_SECONDS} s; CPU-ms "
        f"per request from /proc, the app's and PostgreSQL's. {errors} errors. Load average (1 "
        f"min) before the run: {quiet_before:.1f}, on {os.cpu_count()} cores.",
        "",
        "| mix | app: the mix | app: its operations alone, weighted by its shares | mix / parts "
        "| PostgreSQL: the mix | PostgreSQL: its operations alone, weighted | mix / parts |",
        "|---|---|---|---|---|---|---|",
    ]
    for mix, suffix in MIXES.items():
        row = [mix]
        for cost in (app_ms, database_ms):
            weighted = sum(share * cost[part + suffix] for part, share in parts.items())
            row += [f"{cost[mix]:.2f}", f"{weighted:.2f}", f"{cost[mix] / weighted:.3f}"]
        lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        "| operation | share | app CPU-ms/request | PostgreSQL CPU-ms/request |",
        "|---|---|---|---|",
    ]
    for suffix in MIXES.values():
        lines += [
            f"| {part + suffix} | {share:.0%} | {app_ms[part + suffix]:.2f} "
            f"| {database_ms[part + suffix]:.2f} |"
            for part, share in parts.items()
        ]
    report = "\n".join(lines) + "\n"
    (load.RESULTS / "mix-parts.md").write_text(report)
    print(report)


if __name__ == "__main__":
    main()
