"""`make faults`: the production layout on this machine (a primary and its hot standby, PgBouncer
per host, Redis, two app hosts in network namespaces behind HAProxy, the worker, a webhook
receiver) under a load of careful clients, each fault injected in turn (tests/support/faults.py);
what a client saw during each and whether the invariants held: bench/results/faults.md.
tests/test_faults.py runs the same with fewer clients. As root, a few minutes.

    python bench/faults.py
"""

import argparse
import json
import os
import pathlib
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the layout and the faults are the test's, one copy

from support.fault_suite import run  # noqa: E402
from support.faults import FAULTS  # noqa: E402
from support.production_layout import (  # noqa: E402
    DELIVERY_TIMEOUT_SECONDS,
    IDEMPOTENCY_LEASE_SECONDS,
    unavailable,
)

RESULTS = ROOT / "bench" / "results"
CLIENTS, PAUSE_SECONDS = 4, 0.1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=CLIENTS)
    parser.add_argument("--only", help="run only the faults whose name contains this")
    args = parser.parse_args()
    reason = unavailable()
    if reason:
        raise SystemExit(f"cannot run: {reason}")
    faults = [fault for fault in FAULTS if not args.only or args.only in fault.name]
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="shopapi-faults-") as work_dir:
        results = run(pathlib.Path(work_dir), args.clients, PAUSE_SECONDS, faults)
    results["load_average"] = {"before": load_before, "after": os.getloadavg()[0]}
    results["clients"] = args.clients
    name = "faults" if len(faults) == len(FAULTS) else "faults-partial"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n")
    report = markdown(results)
    (RESULTS / f"{name}.md").write_text(report)
    print("\n" + report)
    return 0 if all(check["held"] for check in results["invariants"].values()) else 1


def markdown(results: dict) -> str:
    load = results["load_average"]
    lines = [
        "# Faults (`make faults`)",
        "",
        f"Measured {time.strftime('%Y-%m-%d')} on this machine ({os.cpu_count()} cores; load "
        f"average {load['before']:.1f} before the run, {load['after']:.1f} after), in "
        f"{results['seconds']:.0f} s. The production layout: a PostgreSQL primary and its "
        "synchronous standby under Patroni (etcd, HAProxy finding the primary through Patroni's "
        "REST API; ops/patroni/patroni.yml), a PgBouncer per app host and one for the worker, "
        "Redis, two app hosts (`make serve-prod`, one "
        "worker each) in network namespaces behind HAProxy (ops/haproxy.cfg, `/readyz` checked "
        "every 0.3 s), the webhook worker and a receiver. "
        f"{results['clients']} clients write through the balancer, one write at a time each "
        f"with a {PAUSE_SECONDS} s pause between writes: orders (and one write in eight a "
        "product; an order takes a product of plentiful stock, and one in four also one that "
        "runs out), each with an `Idempotency-Key`, retried with the same key after an error or "
        "a timeout (10 s; after a 503 or a 409 'in flight', its `Retry-After`), then read back by "
        f"the same caller; {results['writes']} writes, {results['attempts']} requests. The "
        f"hosts run with `IDEMPOTENCY_LEASE_SECONDS={IDEMPOTENCY_LEASE_SECONDS}`, `DRAIN_SECONDS=2`"
        f" and the worker with `DELIVERY_TIMEOUT_SECONDS={DELIVERY_TIMEOUT_SECONDS}`.",
        "",
        "Each fault is injected while the load runs, undone, and followed until every client "
        "has had a write acknowledged again; its row counts the requests that ended between its "
        "injection and the next fault's. *Whole again*: from the injection until the layout was "
        "whole (a host restarted and back in rotation, a server started, a worker started). "
        "*Recovered after*: from the injection until the last client-visible error ended (a "
        "409 'in flight' is not one: the client is told to wait). *Longest write*: the longest a "
        "write answered then had waited for its answer, retries included. *Writes by host*: the "
        "writes each app host answered with a 2xx while the fault's row lasted, per second, and "
        "the longest of them (its request log): a host cut off or slowed must not stall the "
        "other.",
        "",
        "| fault | whole again | requests | client-visible errors | recovered after "
        "| longest write | writes by host |",
        "|---|---|---|---|---|---|---|",
    ]
    for fault in results["faults"]:
        errors = ", ".join(f"{count} x {kind}" for kind, count in fault["errors"].items())
        note = f" ({fault['note']})" if fault["note"] else ""
        by_host = ", ".join(
            f"{host} {rate}/s (longest {fault['longest_write_by_host'][host]} s)"
            for host, rate in fault["writes_per_second"].items()
        )
        lines.append(
            f"| {fault['fault']}{note} | {fault['whole_after']:.1f} s | {fault['attempts']} "
            f"| {errors or 'none'} | {fault['errors_until']:.1f} s "
            f"| {fault['longest_write']:.1f} s | {by_host} |"
        )
    longest = results["longest_write_served"]
    lease = (
        "within the lease: no retry took over a request still running"
        if longest < IDEMPOTENCY_LEASE_SECONDS
        else "longer than the lease: a retry may have run it a second time"
    )
    lines += [
        "",
        "`503 balancer` and `502 balancer` are HAProxy's own answers (no host in rotation, or "
        "the host died with the request); a bare status is a host's problem+json; "
        "`409 in flight` is a retry told to wait (`Retry-After`) while its key's first attempt "
        "holds it; a name is the client's transport error. The longest write a host answered "
        f"took {longest:.1f} s, {lease}.",
        "",
        "## Invariants, after every fault",
        "",
        "| invariant | held | detail |",
        "|---|---|---|",
    ]
    for name, check in results["invariants"].items():
        detail = check["detail"].replace("|", "\\|")
        lines.append(f"| {name} | {'yes' if check['held'] else '**no**'} | {detail} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
