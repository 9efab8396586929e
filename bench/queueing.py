"""What goal T1 of `make bench` (p99 at 0.7 of saturation at most 3x the p50 at 0.2) asks of a
queue, whatever a request costs: a simulation of c servers, first come first served, fed at a
constant rate (wrk's schedule) or at random (Poisson), with service times spread as the last
run's 0.2 step measured them (lognormal, its p99/p50). The ratio does not change when every
request gets cheaper at the same share of saturation; it falls as servers are added. Writes
bench/results/queueing.md.

    python bench/queueing.py
"""

import heapq
import json
import math
import pathlib
import random
import statistics

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
SERVERS = (1, 2, 4, 8, 16)
REQUESTS = 200_000
LOW, HIGH = 0.2, 0.7  # the goal's two shares of saturation
Z_99 = statistics.NormalDist().inv_cdf(0.99)


def latencies(servers: int, share: float, spread: float, arrivals: str, rng) -> list[float]:
    """Each request's time in the system (waiting and served), in units of the median
    service time, for `servers` at `share` of their capacity."""
    sigma = math.log(spread) / Z_99  # a lognormal's p99/p50 is exp(sigma * z_99)
    mean_service = math.exp(sigma * sigma / 2)
    rate = share * servers / mean_service
    free_at = [0.0] * servers
    now, times = 0.0, []
    for _ in range(REQUESTS):
        now += rng.expovariate(rate) if arrivals == "poisson" else 1 / rate
        start = max(now, heapq.heappop(free_at))
        done = start + rng.lognormvariate(0, sigma)
        heapq.heappush(free_at, done)
        times.append(done - now)
    times.sort()
    return times


def quantile(sorted_times: list[float], q: float) -> float:
    return sorted_times[int(len(sorted_times) * q)]


def main() -> None:
    steps = json.loads((RESULTS / "load.json").read_text())["steps"]
    low = next(step for step in steps if step["fraction"] == LOW)
    spread = low["latency_ms"]["p99"] / low["latency_ms"]["p50"]
    rng = random.Random(6)
    lines = [
        "# Goal T1 as a queue: p99 at 0.7 of saturation / p50 at 0.2 (bench/queueing.py)",
        "",
        f"Service times spread as bench/results/load.json's {LOW} step measured them "
        f"(p99/p50 = {spread:.2f}, lognormal); {REQUESTS:,} requests a cell, first come first "
        "served. The goal is at most 3.0x.",
        "",
        "| servers | constant rate (wrk's schedule) | Poisson arrivals |",
        "|---|---|---|",
    ]
    for servers in SERVERS:
        cells = []
        for arrivals in ("constant", "poisson"):
            p50 = quantile(latencies(servers, LOW, spread, arrivals, rng), 0.5)
            p99 = quantile(latencies(servers, HIGH, spread, arrivals, rng), 0.99)
            cells.append(f"{p99 / p50:.2f}x")
        lines.append(f"| {servers} | {' | '.join(cells)} |")
    report = "\n".join(lines) + "\n"
    (RESULTS / "queueing.md").write_text(report)
    print(report)


if __name__ == "__main__":
    main()
