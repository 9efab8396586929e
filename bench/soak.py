"""The soak (`make soak`): the mix at a constant rate (half its saturation) for SOAK_MINUTES, a
line a minute of latency, memory, table sizes and the list COUNT's cost, to tell a leak or a cache
filling from data growing. Results: bench/results/soak.{md,json}; docs/capacity.md says more."""

import datetime
import json
import os
import pathlib
import re
import shutil
import statistics
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import cpu, heap, load  # noqa: E402
from bench.seed import URL, reset, seed  # noqa: E402
from models import Order, OrderItem, Product  # noqa: E402
from models.db import database  # noqa: E402
from models.event import Event  # noqa: E402
from models.idempotency_key import IdempotencyKey  # noqa: E402
from models.webhook import Delivery, DeliveryAttempt  # noqa: E402

MINUTES = float(os.environ.get("SOAK_MINUTES", "30"))
RATE = float(os.environ.get("SOAK_RATE", "0"))  # requests/s; 0: SATURATION_SHARE of saturation
SATURATION_SHARE = 0.5
HEAP = os.environ.get("SOAK_HEAP") == "1"
SATURATION_ROUNDS, SATURATION_SECONDS = 2, 10
# The tables the mix makes grow (orders, their items, their events) or rewrites (products).
GROWING = (Product, Order, OrderItem, Event, IdempotencyKey, Delivery, DeliveryAttempt)
LIST_COUNT_SQL = "SELECT count(*) FROM product WHERE category = 'books'"


def resident_bytes(root: int) -> tuple[int, list[int]]:
    """The resident memory of `root` and its descendants, summed, and each worker's (the
    master's children). Summed RSS counts pages shared since fork once per process: compare
    it with itself over time, not with the machine's memory."""
    total, workers, todo = 0, [], [root]
    while todo:
        pid = todo.pop()
        rss = _rss(pid)
        total += rss
        if pid != root:
            workers.append(rss)
        todo += cpu.children(pid)
    return total, workers


def _rss(pid: int) -> int:
    try:
        status = pathlib.Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return 0
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    return int(match.group(1)) * 1024 if match else 0


def metrics_bytes(log_dir: pathlib.Path) -> int:
    """The size of the server's multiprocess metrics files (a file per worker and metric type,
    growing with the label sets seen)."""
    return sum(path.stat().st_size for path in log_dir.glob("*-metrics-*/*.db"))


def tables() -> dict:
    """Rows (live, dead), total size and last autovacuum of each growing table, from the
    statistics collector (a count(*) of each would load the database the soak measures)."""
    names = [model._meta.table_name for model in GROWING]
    with database.connection_context():
        rows = database.execute_sql(
            "SELECT relname, n_live_tup, n_dead_tup, pg_total_relation_size(relid),"
            " last_autovacuum IS NOT NULL OR last_vacuum IS NOT NULL"
            " FROM pg_stat_user_tables WHERE relname = ANY(%s)",
            (names,),
        ).fetchall()
    return {
        name: {"rows": live, "dead_rows": dead, "bytes": size, "vacuumed": vacuumed}
        for name, live, dead, size, vacuumed in rows
    }


def list_count_cost(times: int = 5) -> dict:
    """What the list's COUNT(*) (one category of products) costs the database now: its time
    (the median of `times`, the machine being shared) and the heap fetches of its index-only
    scan (0 when every page is all-visible)."""
    runs = []
    with database.connection_context():
        for _ in range(times):
            plan = database.execute_sql(f"EXPLAIN (ANALYZE, FORMAT JSON) {LIST_COUNT_SQL}")
            runs.append(plan.fetchone()[0])
    fetches = sum(int(m) for m in re.findall(r'"Heap Fetches": (\d+)', json.dumps(runs[-1])))
    return {
        "ms": statistics.median(run[0]["Execution Time"] for run in runs),
        "heap_fetches": fetches,
    }


def autovacuum_is_on() -> bool:
    with database.connection_context():
        return database.execute_sql("SHOW autovacuum").fetchone()[0] == "on"


def vacuum_as_autovacuum_would() -> list[str]:
    """With autovacuum off (a test server's setting), the soak stands in for it between two
    minutes, as the launcher would within its naptime (a minute): each growing table whose dead
    rows, or rows inserted since its last vacuum, passed autovacuum's threshold (the table's own
    storage parameters, else the server's) is vacuumed. The tables vacuumed."""
    with database.connection_context():
        settings = dict(
            database.execute_sql(
                "SELECT name, setting FROM pg_settings WHERE name LIKE 'autovacuum_vacuum_%%'"
            ).fetchall()
        )
        rows = database.execute_sql(
            "SELECT s.relname, s.n_dead_tup, s.n_ins_since_vacuum, c.reltuples, c.reloptions"
            " FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid"
            " WHERE s.relname = ANY(%s)",
            ([model._meta.table_name for model in GROWING],),
        ).fetchall()
        vacuumed = []
        for name, dead, inserted, tuples, options in rows:
            own = dict(option.split("=", 1) for option in options or [])

            def setting(key, own=own):
                return float(own.get(key, settings[key]))

            rows_now = max(tuples, 0)
            dead_limit = setting("autovacuum_vacuum_threshold") + rows_now * setting(
                "autovacuum_vacuum_scale_factor"
            )
            insert_limit = setting("autovacuum_vacuum_insert_threshold") + rows_now * setting(
                "autovacuum_vacuum_insert_scale_factor"
            )
            if dead > dead_limit or inserted > insert_limit:
                database.execute_sql(f'VACUUM "{name}"')
                vacuumed.append(name)
    return vacuumed


def saturation(server: load.Server, data: pathlib.Path) -> float:
    load.say(
        f"saturation: the mix unthrottled, {SATURATION_ROUNDS} rounds of {SATURATION_SECONDS} s"
    )
    load.wrk([server], data, "mix", load.WARM_UP_SECONDS)
    runs = [load.wrk([server], data, "mix", SATURATION_SECONDS) for _ in range(SATURATION_ROUNDS)]
    for run in runs:
        load.say(load._line("  unthrottled", run))
    return statistics.median(run["throughput"] for run in runs)


def minute(
    server: load.Server, data: pathlib.Path, rate: float, number: int, stand_in: bool
) -> dict:
    """One minute of the mix at `rate`, then the readings."""
    run = load.wrk([server], data, "mix", 60, rate=rate)
    rss, workers = resident_bytes(server.process.pid)
    tables_now, count_now = tables(), list_count_cost()
    return {
        "minute": number,
        **{key: run[key] for key in ("throughput", "latency_ms", "errors", "statuses")},
        "app_cpu_ms": run["app_cpu_ms"],
        "database_cpu_ms": run["database_cpu_ms"],
        "load_average": os.getloadavg()[0],
        "rss_bytes": rss,
        "metrics_bytes": metrics_bytes(data.parent),
        "worker_rss_bytes": workers,
        "tables": tables_now,
        "list_count": count_now,
        "vacuumed": vacuum_as_autovacuum_would() if stand_in else [],
        "error_bodies": run["error_bodies"],
    }


def _say_minute(line: dict) -> None:
    latency, t = line["latency_ms"], line["tables"]
    load.say(
        f"  {line['minute']:3d}  {line['throughput']:6.0f} req/s  p50 {latency['p50']:6.1f}  "
        f"p99 {latency['p99']:7.1f} ms  errors {line['errors']}  load {line['load_average']:4.1f}  "
        f"RSS {line['rss_bytes'] / 2**20:6.1f} MiB  orders {t['order']['rows']:,}  "
        f"events {t['event']['rows']:,}  product dead {t['product']['dead_rows']:,}  "
        f"count {line['list_count']['ms']:.1f} ms ({line['list_count']['heap_fetches']:,} "
        f"heap fetches)  vacuumed {','.join(line['vacuumed']) or '-'}"
    )


def machine_load() -> dict:
    one, five, fifteen = os.getloadavg()
    return {"cores": os.cpu_count(), "load_average": [one, five, fifteen]}


def main() -> int:
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")
    seed(URL)
    reset(URL)
    secrets_env, tokens = load.server_secrets()
    started = datetime.datetime.now(datetime.UTC)
    results: dict = {"started": started.isoformat(timespec="seconds"), "heap": HEAP}
    results["load_before"] = machine_load()
    with tempfile.TemporaryDirectory(prefix="shopapi-soak-") as scratch:
        scratch = pathlib.Path(scratch)
        data = scratch / "clients.lua"
        load.write_clients(data, tokens)
        if HEAP:
            server = heap.traced_server(load.SHOPAPI_PORT, secrets_env, scratch)
        else:
            server = load.shopapi_server(
                "soak", load.SHOPAPI_PORT, os.cpu_count(), secrets_env, scratch
            )
        try:
            results["saturated"] = None if RATE else saturation(server, data)
            rate = RATE or round(results["saturated"] * SATURATION_SHARE)
            results["rate"], results["minutes"] = rate, []
            results["autovacuum"] = autovacuum_is_on()
            load.say(f"soak: the mix at {rate} req/s for {MINUTES:g} minutes")
            for number in range(1, max(1, round(MINUTES)) + 1):
                line = minute(server, data, rate, number, not results["autovacuum"])
                results["minutes"].append(line)
                _say_minute(results["minutes"][-1])
                if HEAP:
                    heap.snapshot(server, scratch, number)
            if HEAP:
                results["heap_growth"] = heap.growth(scratch)
        finally:
            server.stop()
    results["load_after"] = machine_load()
    results["goal"] = goal(results["minutes"])
    name = "soak-heap" if HEAP else "soak"
    load.RESULTS.mkdir(parents=True, exist_ok=True)
    (load.RESULTS / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n")
    report = markdown(results)
    (load.RESULTS / f"{name}.md").write_text(report)
    print("\n" + report)
    errors = sum(line["errors"] for line in results["minutes"])
    if errors:
        print(f"FAILED: {errors} requests failed (see soak.json)", file=sys.stderr)
    return 1 if errors else 0


# The soak's goal: over the last half, each worker's resident memory grows by at most 1 MiB, and
# the last five minutes' p99 is at most 1.5x the first five's.
WORKER_GROWTH_LIMIT_MIB, P99_RATIO_LIMIT, WINDOW_MINUTES = 1.0, 1.5, 5


def goal(minutes: list[dict]) -> dict:
    """The goal's two readings. A window's p99 is the median of its minutes' p99s (wrk gives
    each minute's distribution, not the window's), so one minute's hiccup does not decide it."""
    half = minutes[len(minutes) // 2 - 1] if len(minutes) > 1 else minutes[0]
    last = minutes[-1]
    growth = [
        (after - before) / 2**20
        for before, after in zip(half["worker_rss_bytes"], last["worker_rss_bytes"], strict=False)
    ]
    first_p99 = statistics.median(m["latency_ms"]["p99"] for m in minutes[:WINDOW_MINUTES])
    last_p99 = statistics.median(m["latency_ms"]["p99"] for m in minutes[-WINDOW_MINUTES:])
    worst = max(growth, default=0.0)
    return {
        "from_minute": half["minute"],
        "worker_rss_growth_mib": growth,
        "worker_rss_growth_met": worst <= WORKER_GROWTH_LIMIT_MIB,
        "first_p99_ms": first_p99,
        "last_p99_ms": last_p99,
        "p99_ratio": last_p99 / first_p99,
        "p99_ratio_met": last_p99 / first_p99 <= P99_RATIO_LIMIT,
    }


def markdown(results: dict) -> str:
    minutes = results["minutes"]
    first, last = minutes[0], minutes[-1]
    saturated = (
        f"half the mix's saturated {results['saturated']:.0f} req/s, measured first"
        if results["saturated"]
        else "given (SOAK_RATE)"
    )
    lines = [
        f"# Soak: the mix at {results['rate']:.0f} req/s for {len(minutes)} minutes",
        "",
        f"Started {results['started']}; rate {saturated}. Machine: "
        f"{results['load_before']['cores']} cores, load average "
        f"{results['load_before']['load_average'][1]:.1f} (5 min) before, "
        f"{results['load_after']['load_average'][1]:.1f} after"
        + (" (a single traced worker: tracemalloc)." if results["heap"] else ".")
        + (
            ""
            if results["autovacuum"]
            else " This PostgreSQL runs with autovacuum off: the soak vacuums a table between "
            "two minutes when autovacuum would have (its thresholds, the table's settings)."
        ),
        "",
        "| min | load avg | req/s | p50 ms | p99 ms | errors | app CPU-ms/req | server RSS MiB "
        "| orders | items | events | product dead rows | list COUNT ms (heap fetches) "
        "| then vacuumed |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for line in minutes:
        latency, t = line["latency_ms"], line["tables"]
        lines.append(
            f"| {line['minute']} | {line['load_average']:.1f} | {line['throughput']:.0f} | "
            f"{latency['p50']:.1f} | "
            f"{latency['p99']:.1f} | {line['errors']} | {line['app_cpu_ms']:.2f} | "
            f"{line['rss_bytes'] / 2**20:.1f} | {t['order']['rows']:,} | "
            f"{t['order_item']['rows']:,} | {t['event']['rows']:,} | "
            f"{t['product']['dead_rows']:,} | {line['list_count']['ms']:.1f} "
            f"({line['list_count']['heap_fetches']:,}) | {', '.join(line['vacuumed']) or '-'} |"
        )
    growth = (last["rss_bytes"] - first["rss_bytes"]) / 2**20
    metrics_kib = [line.get("metrics_bytes", 0) / 1024 for line in (first, last)]
    answered_errors = sum(
        n for line in minutes for status, n in line["statuses"].items() if int(status) >= 400
    )
    lines += [
        "",
        f"- p50 {first['latency_ms']['p50']:.1f} → {last['latency_ms']['p50']:.1f} ms, p99 "
        f"{first['latency_ms']['p99']:.1f} → {last['latency_ms']['p99']:.1f} ms (first minute "
        "→ last).",
        f"- Server RSS {first['rss_bytes'] / 2**20:.1f} → {last['rss_bytes'] / 2**20:.1f} MiB "
        f"({growth:+.1f}); per worker, last minute: "
        + ", ".join(f"{rss / 2**20:.1f}" for rss in last["worker_rss_bytes"])
        + " MiB.",
        f"- Multiprocess metrics files: {metrics_kib[0]:,.0f} → {metrics_kib[1]:,.0f} KiB.",
        f"- Errors: {sum(line['errors'] for line in minutes)}, of which {answered_errors}"
        " answered with an error status; the rest are wrk's (a socket error, or no answer "
        "within its 2 s timeout).",
        "",
    ]
    met = results["goal"]
    lines += [
        "| goal | measured | target | |",
        "|---|---|---|---|",
        f"| each worker's RSS growth, minute {met['from_minute']} → {last['minute']} | "
        + ", ".join(f"{mib:+.2f}" for mib in met["worker_rss_growth_mib"])
        + f" MiB | ≤ {WORKER_GROWTH_LIMIT_MIB:g} MiB | "
        f"{'met' if met['worker_rss_growth_met'] else '**missed**'} |",
        f"| p99, last {WINDOW_MINUTES} minutes / first {WINDOW_MINUTES} (median of the minutes' "
        f"p99s) | {met['last_p99_ms']:.1f} / {met['first_p99_ms']:.1f} ms = "
        f"{met['p99_ratio']:.2f}x | ≤ {P99_RATIO_LIMIT:g}x | "
        f"{'met' if met['p99_ratio_met'] else '**missed**'} |",
        "",
    ]
    if results.get("heap_growth"):
        lines += ["What grew in the traced worker's heap, first minute → last:", ""]
        lines += results["heap_growth"] + [""]
    return "\n".join(lines)


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
