"""The fault suite: the production layout (production_layout.py) under a load of careful clients
(write_load.py), each fault of faults.py in turn; what a client saw during each, and what held
after all of them (fault_checks.py). bench/faults.py writes it up, tests/test_faults.py asserts
the invariants."""

import collections
import datetime
import json
import time
from functools import partial

import httpx

from models import event
from shopapi.testing.standby import wait_for
from support.fault_checks import check
from support.faults import DEADLINE_SECONDS, FAULTS
from support.helpers import bearer
from support.previous_release import previous_release
from support.production_layout import Layout, production_layout
from support.write_load import WriteLoad

# Outcomes that are a client's ordinary answers, not errors: a read, a write, a 409 (the stock
# ran out for that order: the final answer, replayed to a retry).
ANSWERS = {"200", "201", "409"}
SCARCE_STOCK, PLENTIFUL_STOCK = 40, 1_000_000
# The longest a write on one host may take while another host is cut off or slowed: the
# database's timeouts end what the faulty host holds well before its fault does.
OTHER_HOSTS_WAIT_SECONDS = 10


def run(work_dir, clients: int, pause: float, faults=FAULTS, say=print) -> dict:
    """Build the layout, run the load through every fault, and check the invariants."""
    started = time.monotonic()

    def say_when(message: str) -> None:
        say(f"{time.monotonic() - started:5.0f} s  {message}")

    # The layout starts on the previous release; the first fault deploys this one.
    release = previous_release(work_dir / "previous-release")
    with production_layout(work_dir, release=release) as layout:
        say_when("the layout is up")
        initial_stock, customer_id, plentiful, scarce = _set_up(layout)
        phases = []
        load = WriteLoad(layout.hosts.base, customer_id, plentiful, scarce, clients, pause)
        with load:
            warm = time.monotonic()
            wait_for(
                lambda: load.settled_since(warm), DEADLINE_SECONDS, "every client's first write"
            )
            for fault in faults:
                injected, injected_at = time.monotonic(), time.time()
                note = fault.inject(layout, load)
                whole = time.monotonic()
                wait_for(
                    partial(load.settled_since, whole),
                    DEADLINE_SECONDS,
                    f"writes after {fault.name}",
                )
                # The standby streaming again, synchronous, before the next fault.
                layout.replication.wait_until_whole()
                phases.append(
                    {"fault": fault.name, "injected": injected, "whole": whole, "note": note}
                    | {"injected_at": injected_at, "database": fault.database}
                    | {"unseen": fault.unseen, "host": layout.isolated_host}
                )
                layout.isolated_host = None
                say_when(f"{fault.name}: whole again after {whole - injected:.1f} s")
        ended, ended_at = time.monotonic(), time.time()
        invariants = check(layout, load, initial_stock, phases, say)
        say_when("checked")
        longest = _longest_write_served(layout)
        writes_by_host = _writes_by_host(layout)
    per_fault = _per_fault(phases, load, ended)
    nexts = [*phases[1:], {"injected_at": ended_at}]
    for phase, after, fault in zip(phases, nexts, per_fault, strict=True):
        start, end = phase["injected_at"], after["injected_at"]
        during = {
            host: [took for at, took in writes if start <= at < end]
            for host, writes in writes_by_host.items()
        }
        fault["writes_per_second"] = {
            host: round(len(took) / (end - start), 2) for host, took in during.items()
        }
        fault["longest_write_by_host"] = {
            host: round(max(took, default=0.0), 2) for host, took in during.items()
        }
    return {
        "longest_write_served": longest,
        "faults": per_fault,
        "invariants": invariants | _unseen(phases, per_fault) | _isolated(phases, per_fault),
        "writes": len(load.writes),
        "attempts": len(load.attempts),
        "seconds": time.monotonic() - started,
    }


def _set_up(layout: Layout) -> tuple[dict[str, int], int, list[int], list[int]]:
    """The webhook (first, so that it gets every event), the customer, and products: some
    plentiful, some that run out under the load (the orders then compete for the last units)."""
    with httpx.Client(base_url=layout.hosts.base, headers=bearer(), timeout=60) as api:
        hook = {"url": layout.receiver.url, "events": list(event.TYPES)}
        _created(api.post("/v1/webhooks", json=hook))
        customer = {"email": "faults@example.com", "name": "Ada", "password": "correct horse"}
        customer_id = _created(api.post("/v1/users", json=customer))["id"]
        initial_stock, products = {}, {PLENTIFUL_STOCK: [], SCARCE_STOCK: []}
        for n, stock in enumerate([PLENTIFUL_STOCK] * 3 + [SCARCE_STOCK] * 3):
            body = {"sku": f"SETUP-{n}", "name": "Cup", "price_cents": 250, "stock": stock}
            products[stock].append(_created(api.post("/v1/products", json=body))["id"])
            initial_stock[body["sku"]] = stock
    return initial_stock, customer_id, products[PLENTIFUL_STOCK], products[SCARCE_STOCK]


def _longest_write_served(layout: Layout) -> float:
    """The seconds of the longest POST a host answered (its request log): a request outliving
    its key's lease could run twice (IDEMPOTENCY_LEASE_SECONDS), as the README says."""
    longest = 0.0
    for name in layout.hosts.names:
        for line in layout.hosts.log(name).read_text().splitlines():
            if '"duration_ms"' in line and '"method":"POST"' in line:
                longest = max(longest, json.loads(line)["duration_ms"] / 1000)
    return longest


def _writes_by_host(layout: Layout) -> dict[str, list[tuple[float, float]]]:
    """Per host, each write it answered with a 2xx: when it ended (epoch seconds) and how long
    it took (seconds), from its request log. How a fault on one host shows on the others."""
    writes = {}
    for name in layout.hosts.names:
        writes[name] = []
        for line in layout.hosts.log(name).read_text().splitlines():
            if '"method":"POST"' in line and '"status":2' in line:
                logged = json.loads(line)
                at = datetime.datetime.fromisoformat(logged["time"]).timestamp()
                writes[name].append((at, logged["duration_ms"] / 1000))
    return writes


def _isolated(phases: list[dict], per_fault: list[dict]) -> dict:
    """A host cut from the database or slowed holds nothing the other hosts' writes wait on
    for long: its transactions are ended by the database's timeouts, not by the fault's end."""
    stalled = [
        f"{fault['fault']}: {host} waited {took} s"
        for phase, fault in zip(phases, per_fault, strict=True)
        if phase["host"]
        for host, took in fault["longest_write_by_host"].items()
        if host != phase["host"] and took > OTHER_HOSTS_WAIT_SECONDS
    ]
    return {
        "no host waits on another's fault": {
            "held": not stalled,
            "detail": f"{len(stalled)} write(s) over {OTHER_HOSTS_WAIT_SECONDS} s: "
            + "; ".join(stalled),
        }
    }


def _created(response: httpx.Response) -> dict:
    if response.status_code != 201:
        raise RuntimeError(f"setting up: {response.status_code} {response.text}")
    return response.json()


def _per_fault(phases: list[dict], load: WriteLoad, ended: float) -> list[dict]:
    """Per fault, what clients saw from its injection to the next one's (a request or a write
    counted when it ended): the requests, the client-visible errors by kind, when the last error
    ended, and the longest a write waited for its answer."""
    results = []
    for phase, after in zip(phases, [*phases[1:], {"injected": ended}], strict=True):
        start, end = phase["injected"], after["injected"]
        attempts = [a for a in load.attempts if start <= a.ended < end]
        errors = [a for a in attempts if a.outcome not in ANSWERS]
        writes = [w for w in load.writes if w.answered and start <= w.answered < end]
        # Not 409 'in flight': that is a retry told to wait for the first attempt's lease.
        failing = [a.ended for a in errors if "in flight" not in a.outcome]
        results.append(
            {
                "fault": phase["fault"],
                "note": phase["note"],
                "whole_after": phase["whole"] - start,
                "seconds": end - start,
                "attempts": len(attempts),
                "errors": dict(collections.Counter(a.outcome for a in errors).most_common()),
                "errors_until": max(failing) - start if failing else 0.0,
                "longest_write": max((w.answered - w.started for w in writes), default=0.0),
                # Each error: the client, when its attempt began and ended (from the
                # injection), what it was, and its outcome.
                "error_log": [_logged(a, start) for a in errors],
            }
        )
    return results


def _unseen(phases: list[dict], per_fault: list[dict]) -> dict:
    """The faults the README says clients see nothing of: a host stopped (it drains), the
    standby (reads move to the primary), Redis (limits fail open, reads go to the primary),
    the worker."""
    seen = [
        f"{fault['fault']}: {fault['errors']}"
        for phase, fault in zip(phases, per_fault, strict=True)
        if phase["unseen"] and fault["errors"]
    ]
    return {
        "no error where the README promises none": {
            "held": not seen,
            "detail": f"{len(seen)} fault(s) seen: {'; '.join(seen)}",
        }
    }


def _logged(attempt, start: float) -> list:
    since = (round(attempt.started - start, 2), round(attempt.ended - start, 2))
    return [attempt.client, *since, attempt.what, attempt.outcome]
