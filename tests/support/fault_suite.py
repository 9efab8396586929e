"""The fault suite: the production layout (production_layout.py) under a load of careful clients
(write_load.py), each fault of faults.py in turn; what a client saw during each, and what held
after all of them (fault_checks.py). bench/faults.py writes it up, tests/test_faults.py asserts
the invariants."""

import collections
import json
import time
from functools import partial

import httpx

from models import event
from shopapi.testing.standby import wait_for
from support.fault_checks import check
from support.faults import DEADLINE_SECONDS, FAULTS
from support.helpers import bearer
from support.production_layout import Layout, production_layout
from support.write_load import WriteLoad

# Outcomes that are a client's ordinary answers, not errors: a read, a write, a 409 (the stock
# ran out for that order: the final answer, replayed to a retry).
ANSWERS = {"200", "201", "409"}
SCARCE_STOCK, PLENTIFUL_STOCK = 40, 1_000_000


def run(work_dir, clients: int, pause: float, faults=FAULTS, say=print) -> dict:
    """Build the layout, run the load through every fault, and check the invariants."""
    started = time.monotonic()

    def say_when(message: str) -> None:
        say(f"{time.monotonic() - started:5.0f} s  {message}")

    with production_layout(work_dir) as layout:
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
                injected = time.monotonic()
                note = fault.inject(layout, load)
                whole = time.monotonic()
                wait_for(
                    partial(load.settled_since, whole),
                    DEADLINE_SECONDS,
                    f"writes after {fault.name}",
                )
                phases.append(
                    {"fault": fault.name, "injected": injected, "whole": whole, "note": note}
                    | {"database": fault.database, "unseen": fault.unseen}
                )
                say_when(f"{fault.name}: whole again after {whole - injected:.1f} s")
        ended = time.monotonic()
        invariants = check(layout, load, initial_stock, phases, say)
        say_when("checked")
        longest = _longest_write_served(layout)
    per_fault = _per_fault(phases, load, ended)
    return {
        "longest_write_served": longest,
        "faults": per_fault,
        "invariants": invariants | _unseen(phases, per_fault),
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
