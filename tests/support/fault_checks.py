"""What must hold after the fault suite's faults (fault_suite.py), whatever happened: each
acknowledged write on the primary as acknowledged and read back by its writer, the standby equal
to the primary, one order per Idempotency-Key, no product oversold, every event delivered, and
twice only where the README says it can be."""

import collections
import contextlib
import time
from functools import partial

import peewee

from shopapi.testing.standby import Server, wait_for
from support.faults import DEADLINE_SECONDS
from support.production_layout import Layout
from support.write_load import WriteLoad

# What a query says when the server it asked is gone: it ended the session without an error the
# client could read (a crash-restart's SIGQUIT sends a notice, then closes), or is not back yet.
_SERVER_GONE = (
    "server closed the connection unexpectedly",
    "Connection refused",
    "the database system is starting up",
    "the database system is shutting down",
)


def on_standby(query, standby: Server, say):
    """`query()` (a read of the standby; the replay check reads the primary first), asked again
    until the deadline when the standby cancelled it (it cancels at once whatever holds back its
    replay: max_standby_streaming_delay = 0, standby.py) or a server ended its session. Neither
    says anything of what the faults left: the standby's replay and its rows are what the checks
    compare. A lost session is said, with the standby's log: the faults are over by now, and
    nothing here ends a session."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    told = False
    while True:
        try:
            return query()
        except peewee.OperationalError as error:
            gone = any(sign in str(error) for sign in _SERVER_GONE)
            if not (gone or "conflict with recovery" in str(error)):
                raise
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the standby did not answer within {DEADLINE_SECONDS} s: {error}\n"
                    f"{standby.log_tail()}"
                ) from error
            if gone and not told:
                told = True
                say(f"the checks lost a database session ({error}); the standby's log:")
                say(standby.log_tail())
            time.sleep(0.05)


def check(layout: Layout, load: WriteLoad, initial_stock: dict[str, int], phases, say) -> dict:
    """Each invariant: {"held": bool, "detail": str}. Waits first for the standby to replay
    everything and the worker to settle every delivery (within a deadline)."""
    replication = layout.replication
    wait_for(
        lambda: on_standby(replication.replayed_everything, replication.standby, say),
        DEADLINE_SECONDS,
        "the standby to replay everything",
    )
    primary, standby = replication.primary, replication.standby
    results = {}

    def holds(name: str, failures: list, what: str) -> None:
        shown = "; ".join(map(str, failures[:5])) + (" ..." if len(failures) > 5 else "")
        results[name] = {"held": not failures, "detail": f"{len(failures)} {what}: {shown}"}

    orders = {row[0]: row for row in primary.query('SELECT id, note, total_cents FROM "order"')}
    items = collections.defaultdict(list)
    for order_id, product_id, quantity in primary.query(
        "SELECT order_id, product_id, quantity FROM order_item"
    ):
        items[order_id].append((product_id, quantity))
    products = {row[0]: row for row in primary.query("SELECT id, sku, price_cents FROM product")}

    acknowledged = [w for w in load.writes if w.status is not None and w.status < 300]
    holds("every write answered", [w.key for w in load.writes if w.status is None], "given up")
    holds(
        "acknowledged writes on the primary",
        [w.key for w in acknowledged if not _as_acknowledged(w, orders, items, products)],
        "missing or not as acknowledged",
    )
    tables = ['"order"', "order_item", "product"]
    holds(
        "the standby equal to the primary",
        [
            t
            for t in tables
            if _table(primary, t) != on_standby(partial(_table, standby, t), standby, say)
        ],
        "table(s) differ",
    )
    holds(
        "each write read back by its writer",
        [f"{w.key}: {w.read_back} {w.detail}" for w in acknowledged if w.read_back != "equal"],
        "not read back as acknowledged",
    )
    by_key = collections.Counter(note for _, note, _ in orders.values())
    refused = {w.key: w.status for w in load.writes if w.status is not None and w.status >= 300}
    holds(
        "one order per Idempotency-Key",
        [f"{key}: {count} orders" for key, count in by_key.items() if count > 1]
        + [
            f"{key}: placed, though answered {status}"
            for key, status in refused.items()
            if key in by_key
        ]
        + [
            f"{w.key}: {w.status} {w.answer}"
            for w in load.writes
            if w.what == "product" and w.status is not None and w.status != 201
        ],
        "key(s) that did not give one answer",
    )
    for write in load.writes:
        if write.what == "product":
            initial_stock[write.body["sku"]] = write.body["stock"]
    holds("no product oversold", _oversold(primary, initial_stock), "product(s)")
    holds("no id handed out twice", _ids_given_twice(acknowledged), "id(s)")
    holds(
        "no webhook-id handed out twice",
        [
            f"{webhook_id}: {len(bodies)} different bodies"
            for webhook_id, bodies in layout.deliveries.bodies.items()
            if len(bodies) > 1
        ],
        "webhook-id(s)",
    )
    holds("the worker outlived its database's absence", layout.worker_exits, "exit(s)")
    results.update(_deliveries(layout, phases))
    return results


def _ids_given_twice(acknowledged) -> list[str]:
    """The ids acknowledged to two writes (two keys): a sequence that went back, after a
    failover that lost what it had handed out."""
    keys = collections.defaultdict(set)
    for write in acknowledged:
        keys[write.what, write.answer["id"]].add(write.key)
    return [f"{what} {id_}: {sorted(k)}" for (what, id_), k in keys.items() if len(k) > 1]


def _as_acknowledged(write, orders, items, products) -> bool:
    answer = write.answer
    if write.what == "product":
        row = products.get(answer["id"])
        return row is not None and row[1:] == (write.body["sku"], write.body["price_cents"])
    row = orders.get(answer["id"])
    wanted = sorted((item["product_id"], item["quantity"]) for item in write.body["items"])
    return (
        row is not None
        and row[1:] == (write.key, answer["total_cents"])
        and sorted(items[answer["id"]]) == wanted
    )


def _table(server: Server, table: str) -> list[tuple]:
    return server.query(f"SELECT * FROM {table} ORDER BY id")  # noqa: S608 (our own names)


def _oversold(primary: Server, initial_stock: dict[str, int]) -> list[str]:
    """Products below 0, or whose stock is not what they started with less every order's."""
    rows = primary.query(
        "SELECT p.sku, p.stock, coalesce(sum(i.quantity) FILTER "
        "(WHERE o.status <> 'cancelled'), 0) FROM product p "
        'LEFT JOIN order_item i ON i.product_id = p.id LEFT JOIN "order" o ON o.id = i.order_id '
        "GROUP BY p.id, p.sku, p.stock"
    )
    return [
        f"{sku}: stock {stock}, started with {initial_stock.get(sku)}, {ordered} ordered"
        for sku, stock, ordered in rows
        if stock < 0 or initial_stock.get(sku) is None or stock != initial_stock[sku] - ordered
    ]


def _deliveries(layout: Layout, phases: list[dict]) -> dict:
    """Every event delivered at least once; a duplicate only where the README says one can be:
    the delivery was under way when its worker was SIGKILLed, or when the worker lost its
    database (its answer could not be recorded), or an attempt of it failed (a timeout: the
    receiver may have had it) and was retried."""
    primary = layout.replication.primary

    def received() -> collections.Counter:
        return collections.Counter(event for event, _ in layout.deliveries.received)

    def settled() -> bool:
        pending = primary.query("SELECT count(*) FROM delivery WHERE status = 'pending'")[0][0]
        events = {row[0] for row in primary.query("SELECT id FROM event")}
        return pending == 0 and events <= received().keys()

    with contextlib.suppress(AssertionError):  # what is left undelivered is reported below
        wait_for(settled, DEADLINE_SECONDS, "every event delivered")
    events = {row[0] for row in primary.query("SELECT id FROM event")}
    counts = received()
    failed = primary.query("SELECT event_id, status FROM delivery WHERE status <> 'delivered'")
    duplicates = {event for event, count in counts.items() if count > 1}
    killed = duplicates & set(layout.deliveries.held)
    retried = duplicates & {
        row[0]
        for row in primary.query(
            "SELECT d.event_id FROM delivery d JOIN delivery_attempt a ON a.delivery_id = d.id "
            "WHERE a.response_status IS NULL OR a.response_status >= 300"
        )
    }
    first = {}
    for event, at in layout.deliveries.received:
        first.setdefault(event, at)
    # Sent, then the answer could not be recorded: the database went away just before or while
    # the fault lasted.
    away = [(p["injected"] - 1, p["whole"] + 1) for p in phases if p["database"]]
    lost = {e for e in duplicates if any(start <= first[e] <= end for start, end in away)}
    unexplained = [
        f"event {event}: {counts[event]} times, first " + _when(first[event], phases)
        for event in sorted(duplicates - killed - retried - lost)
    ]
    return {
        "every event delivered at least once": {
            "held": not (events - counts.keys()) and not failed,
            "detail": f"{len(events - counts.keys())} of {len(events)} events never received; "
            f"deliveries not delivered: {failed[:5]}",
        },
        "duplicates only where the README allows": {
            "held": not unexplained,
            "detail": f"{len(duplicates)} events received more than once: {len(killed)} under "
            f"way at the worker's SIGKILL, {len(lost - killed)} when it lost its database, "
            f"{len(retried - killed - lost)} after a failed attempt; "
            f"unexplained: {unexplained[:5]}",
        },
    }


def _when(moment: float, phases: list[dict]) -> str:
    """`moment` told against the faults: "2.1 s after the injection of <fault>"."""
    before = [p for p in phases if p["injected"] <= moment]
    if not before:
        return "before the first fault"
    return f"{moment - before[-1]['injected']:.1f} s after the injection of {before[-1]['fault']}"
