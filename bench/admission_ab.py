"""How a worker should run requests when more come than it can serve (issue 41's levers): the
production server under `mix_v3`, with admission control off and with several limits and waits,
each measured as `make bench` measures goals T1 and T2: its saturated rate (2xx a second at a
constant rate, offered the closed loop's: load.open_loop_saturation), then a constant rate at
0.2, 0.7, 0.9 and 2.0 of it, every answer timed from when it was due.
Each variant runs in turn, twice (interleaved rounds), on the bench's seeded primary and standby.
Writes bench/results/admission-ab.{json,md} (--report names another pair there); --pool reports
earlier runs' rounds together.

    python bench/admission_ab.py [--rounds N] [--variants NAME ...] [--report NAME]
    python bench/admission_ab.py --pool run1.json run2.json
"""

import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import load  # noqa: E402

# name: the settings it changes (docs/configuration.md). "waits 1 s" is a line with one wait,
# burst or overload; "waits 1 s/20 ms" waits 1 s in a burst and 20 ms once it has refused someone.
ONE_WAIT = {"ADMISSION_STANDING_WAIT_MS": "1000"}
SHORT_BURST_WAIT = {"ADMISSION_MAX_WAIT_MS": "100", "ADMISSION_STANDING_WAIT_MS": "10"}
FOUR = {"ADMISSION_CONCURRENCY": "4"}  # the default until 2 measured better (2+8 below)
VARIANTS = {
    "off": {"ADMISSION_CONCURRENCY": "0"},
    "4+8, waits 1 s": {**FOUR, **ONE_WAIT},
    "2+4, waits 1 s": {"ADMISSION_QUEUE": "4", **ONE_WAIT},
    "8+16, waits 1 s": {"ADMISSION_CONCURRENCY": "8", "ADMISSION_QUEUE": "16", **ONE_WAIT},
    "4+8, waits 1 s/10 ms": {**FOUR, "ADMISSION_STANDING_WAIT_MS": "10"},
    "4+8, waits 1 s/20 ms": FOUR,
    "4+8, waits 1 s/50 ms": {**FOUR, "ADMISSION_STANDING_WAIT_MS": "50"},
    # Fewer executing at once: each runs with fewer threads sharing the worker's GIL.
    "2+8, waits 1 s/20 ms (default)": {},
    "3+8, waits 1 s/20 ms": {"ADMISSION_CONCURRENCY": "3"},
    "2+16, waits 1 s/20 ms": {"ADMISSION_QUEUE": "16"},
    # A short line instead of a short wait: a full line refuses at the door, and a place that
    # frees finds a waiter.
    "4+2, waits 1 s": {**FOUR, "ADMISSION_QUEUE": "2", **ONE_WAIT},
    "4+8, waits 100/10 ms": {**FOUR, **SHORT_BURST_WAIT},
    "2+8, waits 100/10 ms": SHORT_BURST_WAIT,
    # Flask's threads (and the pool) cut to what the gate lets execute.
    "4+8, waits 1 s/20 ms, 4 threads": {**FOUR, "DATABASE_POOL_SIZE": "4"},
}
FRACTIONS = (0.2, 0.7, 0.9, 2.0)
SATURATION_SECONDS = 8


def measure(server: load.Server, data: pathlib.Path) -> dict:
    load.wrk([server], data, "mix_v3", load.WARM_UP_SECONDS)
    saturated = load.wrk([server], data, "mix_v3", SATURATION_SECONDS)
    rate = load.open_loop_saturation(server, data, saturated)["goodput"]
    steps = {}
    for fraction in FRACTIONS:
        seconds = load.OVERLOAD_SECONDS if fraction > 1 else load.STEP_SECONDS
        run = load.wrk(
            [server], data, "mix_v3", seconds, rate=round(rate * fraction),
            connections=load.open_connections(rate * fraction),
        )  # fmt: skip
        steps[fraction] = load.step_of(fraction, rate, run)
        load.say(load.step_line(steps[fraction]))
    low, high, over = steps[0.2], steps[0.7], steps[2.0]
    base = low["latency_ms"]["p50"]
    return {
        "saturated": rate,
        "saturated_statuses": saturated["statuses"],
        "app_cpu_ms": saturated["app_cpu_ms"],
        "t1": high["latency_ms"]["p99"] / base,
        "errors_high": high["errors"],
        "errors_near": steps[0.9]["errors"],
        "t2_goodput": over["goodput"] / rate,
        "t2_errors": over["errors"],
        "t2_p99_ok": over["latency_ok_ms"].get("p99", float("nan")) / base,
        "p50_low_ms": base,
        "p99_high_ms": high["latency_ms"]["p99"],
        "p99_over_ok_ms": over["latency_ok_ms"].get("p99", float("nan")),
        "p99_over_shed_ms": over["latency_shed_ms"].get("p99", float("nan")),
        "steps": {str(fraction): step for fraction, step in steps.items()},
    }


def measure_variants(variants: dict[str, dict], rounds: int) -> dict[str, list[dict]]:
    secrets_env, tokens = load.server_secrets()
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    with (
        load.seeded_clusters() as replication,
        tempfile.TemporaryDirectory(prefix="shopapi-admission-") as scratch,
    ):
        scratch = pathlib.Path(scratch)
        data = scratch / "clients.lua"
        load.write_clients(data, tokens)
        primary, replica = replication.primary.url, replication.standby.url
        for round_number in range(rounds):
            for name, settings in variants.items():
                load.say(f"round {round_number + 1}: {name}")
                server = load.shopapi_server(
                    "shopapi", load.SHOPAPI_PORT, 2, secrets_env, scratch, primary, replica,
                    settings=settings,
                )  # fmt: skip
                try:
                    runs[name].append(measure(server, data))
                finally:
                    server.stop()
    return runs


def pooled(paths: list[pathlib.Path]) -> dict[str, list[dict]]:
    """Earlier runs' rounds (admission-ab.json), each variant's together, as VARIANTS orders."""
    runs: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    for path in paths:
        for name, variant in json.loads(path.read_text())["runs"].items():
            runs.setdefault(name, []).extend(variant)  # a name since changed comes last
    return {name: variant for name, variant in runs.items() if variant}


def write_report(runs: dict[str, list[dict]], measured: str, report_name: str) -> None:
    for variant in runs.values():
        for run in variant:
            run["goodput_over"] = run["steps"][str(load.OVERLOAD)]["goodput"]
    keys = (
        "saturated", "app_cpu_ms", "t1", "errors_high", "errors_near", "goodput_over",
        "t2_goodput", "t2_errors", "t2_p99_ok", "p50_low_ms", "p99_high_ms", "p99_over_ok_ms",
        "p99_over_shed_ms",
    )  # fmt: skip
    summed = ("errors_high", "errors_near", "t2_errors")
    # Errors are counted over every round; the rest are medians.
    summary = {
        name: {
            # Runs from before a key was measured (errors at 0.9) have none: nan.
            key: (sum if key in summed else statistics.median)(
                run.get(key, float("nan")) for run in variant
            )
            for key in keys
        }
        for name, variant in runs.items()
    }
    (load.RESULTS / f"{report_name}.json").write_text(
        json.dumps({"summary": summary, "runs": runs}, indent=2) + "\n"
    )
    lines = [
        "# Admission control A/B (bench/admission_ab.py): mix_v3 on the production server, "
        "medians of each variant's rounds",
        "",
        "Goals: T1 at most 3x; T2 2xx at least 0.9x the saturated rate, 0 errors, p99 of the 2xx "
        "at most 5x the p50 at 0.2. The saturated rate is each variant's own: what it serves "
        "offered the closed loop's rate, a little past saturation. Errors are of all rounds.",
        "",
        "| variant (executing + line, per worker) | rounds | saturated 2xx/s | app CPU-ms/req "
        "| p50 at 0.2 ms | p99 at 0.7 ms | T1 | errors at 0.7 | errors at 0.9 | 2xx/s at 2.0 "
        "| 2xx at 2.0 / saturated | errors at 2.0 | p99 2xx at 2.0 ms | T2 p99 "
        "| p99 503 at 2.0 ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in summary.items():
        lines.append(
            f"| {name} | {len(runs[name])} | {s['saturated']:,.0f} | {s['app_cpu_ms']:.2f} "
            f"| {s['p50_low_ms']:.1f} | {s['p99_high_ms']:.1f} | {s['t1']:.2f}x "
            f"| {s['errors_high']:.0f} | {s['errors_near']:.0f} | {s['goodput_over']:,.0f} "
            f"| {s['t2_goodput']:.2f}x "
            f"| {s['t2_errors']:.0f} | {s['p99_over_ok_ms']:.1f} | {s['t2_p99_ok']:.2f}x "
            f"| {s['p99_over_shed_ms']:.1f} |"
        )
    report = "\n".join([*lines, "", measured]) + "\n"
    (load.RESULTS / f"{report_name}.md").write_text(report)
    print(report)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--report", default="admission-ab", help="bench/results/REPORT.{json,md}")
    parser.add_argument(
        "--pool", nargs="+", type=pathlib.Path, metavar="JSON",
        help="measure nothing: report the rounds of these earlier admission-ab.json together",
    )  # fmt: skip
    arguments = parser.parse_args()
    if arguments.pool:
        write_report(
            pooled(arguments.pool),
            f"Rounds pooled from {len(arguments.pool)} runs, interleaved in each.",
            arguments.report,
        )
        return
    load_before = os.getloadavg()[0]
    variants = {name: VARIANTS[name] for name in arguments.variants}
    runs = measure_variants(variants, arguments.rounds)
    write_report(
        runs,
        f"Interleaved rounds. Load average (1 min) {load_before:.1f} before the run, "
        f"{os.getloadavg()[0]:.1f} after, on {os.cpu_count()} cores: above the cores, other work "
        "shared the CPU.",
        arguments.report,
    )


if __name__ == "__main__":
    main()
