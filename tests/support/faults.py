"""The faults of the fault suite (fault_suite.py), each injected into the production layout
(production_layout.py) while the load runs, and undone: each returns once the layout is whole
again, with a note of what it hit."""

import collections
import contextlib
import dataclasses
import os
import shutil
import signal
import time
from collections.abc import Callable

import peewee
import psycopg2

from shopapi.testing.hosts import ROOT
from shopapi.testing.standby import Server, wait_for
from support.production_layout import Layout, migrate_to
from support.write_load import WriteLoad

# Generous: a busy 2-core machine restarts a host, or a cluster, in many seconds.
DEADLINE_SECONDS = 180
# Attempts each client makes while a fault without a duration of its own holds.
ATTEMPTS_PER_CLIENT = 25


@dataclasses.dataclass(frozen=True)
class Fault:
    name: str
    # Injects the fault and undoes it, returning once the layout is whole again; a note of what
    # it did, or None.
    inject: Callable[[Layout, WriteLoad], str | None]
    # Whether the worker may lose its database meanwhile.
    database: bool = False
    # Whether the README promises that clients see nothing of it.
    unseen: bool = False


def _while_load_runs(load: WriteLoad) -> None:
    """Until each client has made ATTEMPTS_PER_CLIENT more attempts (on average)."""
    target = load.count() + ATTEMPTS_PER_CLIENT * load.clients
    wait_for(lambda: load.count() >= target, DEADLINE_SECONDS, "the load to go on")


def _restart(layout: Layout, name: str) -> None:
    layout.hosts.start(name)
    layout.wait_until_whole([name])


# -- The faults


@contextlib.contextmanager
def _writes_parked(primary: Server):
    """Every write of the load waits on the products table until the block ends (an order
    takes stock, a product is inserted; reads go on): requests in flight on the hosts, at a
    moment of our choosing."""
    connection = psycopg2.connect(primary.url)
    try:
        connection.cursor().execute("LOCK TABLE product IN EXCLUSIVE MODE")
        yield
    finally:
        with contextlib.suppress(psycopg2.Error):  # a fault may have ended it already
            connection.rollback()
        connection.close()


def _waiting(primary: Server, statement: str) -> dict[str, int]:
    """The requests waiting on a lock in a statement that starts with `statement`, by host."""
    rows = primary.query(
        "SELECT application_name, count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND application_name LIKE 'shopapi-%%' AND query LIKE %s GROUP BY 1",
        (f"{statement}%",),
    )
    return {name.removeprefix("shopapi-"): count for name, count in rows}


def _writes_at_the_products(primary: Server) -> dict[str, int]:
    """By host, the writes that `_writes_parked` holds: an order taking stock, a product."""
    waiting = collections.Counter(_waiting(primary, 'UPDATE "product"'))
    waiting.update(_waiting(primary, 'INSERT INTO "product"'))
    return dict(waiting)


def _a_host_with_writes_in_flight(layout: Layout) -> tuple[str, int]:
    parked = wait_for(
        lambda: _writes_at_the_products(layout.replication.primary),
        DEADLINE_SECONDS,
        "writes parked on a host",
    )
    return next(iter(parked.items()))


@contextlib.contextmanager
def _answers_held(primary: Server):
    """The writes in flight now cannot keep their answers until the block ends: the rows of
    their Idempotency-Keys are locked (but for those a write's own transaction holds)."""
    connection = psycopg2.connect(primary.url)
    try:
        connection.cursor().execute(
            "SELECT id FROM idempotency_key WHERE status IS NULL FOR UPDATE SKIP LOCKED"
        )
        yield
    finally:
        connection.rollback()
        connection.close()


def release_rolled_out(layout: Layout, load: WriteLoad) -> str:
    """This release deployed over the previous one under load, in docs/operations.md's order:
    its migrations run once while the old hosts serve; then each host stopped (it drains) and
    started on this release in turn; then the worker."""
    applied = migrate_to(ROOT, layout.replication.url).strip()
    for name in layout.hosts.names:
        server = layout.hosts.processes[name]
        server.send_signal(signal.SIGTERM)
        layout.hosts.wait_for_state(name, "DOWN")
        server.wait(timeout=DEADLINE_SECONDS)
        layout.hosts.kill(name)  # nothing of it left (its workers exit with its master)
        layout.hosts.releases[name] = ROOT
        _restart(layout, name)
    layout.worker.send_signal(signal.SIGTERM)
    layout.worker.wait(timeout=DEADLINE_SECONDS)
    layout.release = ROOT
    layout.start_worker()
    return applied  # "migrations applied: ..."


def host_killed(layout: Layout, load: WriteLoad) -> str:
    with _writes_parked(layout.replication.primary):
        victim, in_flight = _a_host_with_writes_in_flight(layout)
        layout.hosts.kill(victim)
    _restart(layout, victim)
    return f"{victim}, with {in_flight} write(s) in flight"


def host_killed_before_commit(layout: Layout, load: WriteLoad) -> str:
    """The crash window of an idempotent write: its work done, its answer being stored in the
    same transaction (shopapi/pipeline/idempotency.py), the commit not yet sent."""
    primary = layout.replication.primary
    with contextlib.ExitStack() as answers:
        with _writes_parked(primary):
            _a_host_with_writes_in_flight(layout)
            answers.enter_context(_answers_held(primary))
        # Let go: each parked write takes its stock, then waits to store its answer; a write
        # for a product one of them holds waits behind it, as long as the answers are held.
        victim = wait_for(
            lambda: _a_host_storing_answers(primary), DEADLINE_SECONDS, "writes to store answers"
        )
        layout.hosts.kill(victim)
        # A statement the host had sent would still run once the lock is gone: a host that
        # crashed in this window had not sent it yet.
        kept_back = _terminate_waiting(primary, victim, 'UPDATE "idempotency_key"')
    _restart(layout, victim)
    return f"{victim}, with {kept_back} write(s) done but their answers not kept"


def _a_host_storing_answers(primary: Server) -> str | None:
    """Once every write waiting at the products waits only on writes that wait themselves (on
    an answer held, in the end), the host with the most writes waiting to store their answers;
    None before."""
    unsettled = primary.query(
        "SELECT 1 FROM pg_stat_activity AS waiting, unnest(pg_blocking_pids(waiting.pid)) AS b "
        "JOIN pg_stat_activity AS blocker ON blocker.pid = b "
        "WHERE waiting.wait_event_type = 'Lock' AND waiting.application_name LIKE 'shopapi-%%' "
        "AND (waiting.query LIKE %s OR waiting.query LIKE %s) "
        "AND blocker.wait_event_type IS DISTINCT FROM 'Lock'",
        ('UPDATE "product"%', 'INSERT INTO "product"%'),
    )
    storing = _waiting(primary, 'UPDATE "idempotency_key"')
    if unsettled or not storing:
        return None
    return max(storing, key=storing.get)


def _terminate_waiting(primary: Server, host: str, statement: str) -> int:
    """End the sessions of `host` waiting on a lock in a statement starting with `statement`;
    returns once they are gone (a session told to end may still take the lock it waited for)."""
    pids = [
        pid
        for (pid,) in primary.query(
            "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND application_name = %s AND query LIKE %s",
            (f"shopapi-{host}", f"{statement}%"),
        )
    ]
    for pid in pids:
        primary.query("SELECT pg_terminate_backend(%s)", (pid,))
    wait_for(
        lambda: not primary.query("SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)),
        DEADLINE_SECONDS,
        "the sessions to end",
    )
    return len(pids)


def _terminated(layout: Layout, stop) -> str:
    """A host stopped by `stop(its server)` while writes are in flight on it, which it is left
    to finish once it has left the rotation."""
    with _writes_parked(layout.replication.primary):
        victim, in_flight = _a_host_with_writes_in_flight(layout)
        server = layout.hosts.processes[victim]
        stop(server)
        layout.hosts.wait_for_state(victim, "DOWN")
    server.wait(timeout=DEADLINE_SECONDS)
    layout.hosts.kill(victim)  # nothing of it left (its workers exit with its master)
    _restart(layout, victim)
    return f"{victim}, with {in_flight} write(s) in flight"


def host_terminated(layout: Layout, load: WriteLoad) -> str:
    return _terminated(layout, lambda server: server.send_signal(signal.SIGTERM))


def host_group_terminated(layout: Layout, load: WriteLoad) -> str:
    return _terminated(layout, lambda server: os.killpg(server.pid, signal.SIGTERM))


def primary_restarted(layout: Layout, load: WriteLoad) -> None:
    """The primary's PostgreSQL restarted by Patroni (an operator's `patronictl restart`)."""
    tier = layout.replication
    leader = tier.leader()
    leader.restart_postgresql()
    layout.wait_until_whole()


def primary_lost(layout: Layout, load: WriteLoad) -> str:
    """The primary's host lost for good (Patroni and PostgreSQL SIGKILLed at once, writes in
    flight): Patroni promotes the synchronous standby once the leader's key expires. The lost
    host is then replaced by a new one, which Patroni makes the new primary's standby."""
    tier = layout.replication
    with _writes_parked(tier.primary):
        _, in_flight = _a_host_with_writes_in_flight(layout)
        lost = tier.leader()
        lost.kill()
    promoted = wait_for(tier.leader, DEADLINE_SECONDS, "Patroni to promote the standby")
    # Its role-change callback moves every sequence past what the lost primary could have
    # issued (models/after_promotion.py), once for the new timeline.
    wait_for(
        lambda: _sequences_advanced(promoted.server),
        DEADLINE_SECONDS,
        "the promoted primary's sequences advanced",
    )
    tier.restart_node(lost, rebuilt=True)
    layout.wait_until_whole()
    return (
        f"{lost.name} lost with {in_flight} write(s) in flight; {promoted.name} promoted, its "
        "sequences advanced"
    )


def _sequences_advanced(server: Server) -> bool:
    with contextlib.suppress(peewee.DatabaseError):
        return bool(
            server.query(
                "SELECT 1 FROM sequence_advance WHERE timeline_id ="
                " ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int"
            )
        )
    return False


def standby_stopped(layout: Layout, load: WriteLoad) -> None:
    tier = layout.replication
    standby = tier.node_of(tier.standby)
    standby.stop()
    _while_load_runs(load)
    standby.start()
    layout.wait_until_whole()


def redis_stopped(layout: Layout, load: WriteLoad) -> None:
    layout.redis.stop()
    _while_load_runs(load)
    layout.redis.start()


def worker_killed_mid_delivery(layout: Layout, load: WriteLoad) -> str:
    layout.deliveries.hold()
    wait_for(lambda: layout.deliveries.held, DEADLINE_SECONDS, "a webhook delivery under way")
    layout.kill_worker()
    layout.deliveries.release()
    in_flight = sorted(layout.deliveries.held)
    layout.start_worker()
    return f"event(s) {', '.join(map(str, in_flight))} under way"


def _terminate_connections(server: Server) -> int:
    ended = server.query(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
    )
    return ended[0][0]


def connections_terminated(layout: Layout, load: WriteLoad) -> str:
    with _writes_parked(layout.replication.primary):
        _, in_flight = _a_host_with_writes_in_flight(layout)
        primary = _terminate_connections(layout.replication.primary)
        standby = _terminate_connections(layout.replication.standby)
    return f"{primary} on the primary, {standby} on the standby; {in_flight} write(s) in flight"


def slots_exhausted(layout: Layout, load: WriteLoad) -> str:
    held = []
    try:
        while True:
            try:
                held.append(psycopg2.connect(layout.replication.primary.url, connect_timeout=10))
            except psycopg2.OperationalError as error:
                if "too many clients" not in str(error) and "reserved" not in str(error):
                    raise
                break
        _while_load_runs(load)
    finally:
        for connection in held:
            connection.close()
    return f"{len(held)} connections opened until refused"


def pgbouncer_killed(layout: Layout, load: WriteLoad) -> str:
    """A host's PgBouncer SIGKILLed with writes in flight on that host, then started again."""
    with _writes_parked(layout.replication.primary):
        victim, in_flight = _a_host_with_writes_in_flight(layout)
        layout.bouncers[victim].kill()
    layout.bouncers[victim].restart()
    layout.wait_until_whole()
    return f"{victim}'s, with {in_flight} write(s) in flight"


def worker_started_without_database(layout: Layout, load: WriteLoad) -> str:
    """The worker's host restarted while its database path is down: the worker starts first,
    and must wait for the database, not exit."""
    layout.kill_worker()
    bouncer = layout.bouncers["worker"]
    bouncer.kill()
    layout.start_worker()
    _while_load_runs(load)  # events wait meanwhile
    started, delivered = layout.worker, len(layout.deliveries.received)
    bouncer.restart()
    wait_for(
        lambda: started.poll() is not None or len(layout.deliveries.received) > delivered,
        DEADLINE_SECONDS,
        "the worker to deliver again",
    )
    if started.poll() is not None:
        layout.worker_exits.append(f"exit status {started.returncode} without its database")
        layout.start_worker()  # the invariants then check what it had left undelivered
        return "the worker exited without its database, and was started again"
    return "the worker waited for its database"


PARTITION_SECONDS = 20


def host_partitioned(layout: Layout, load: WriteLoad) -> str:
    """A host cut from its database path (every packet to and from its PgBouncer dropped in its
    namespace) for PARTITION_SECONDS, a write of it mid-transaction: its row locks must not
    stall the other hosts' writes for the partition's length."""
    with _writes_parked(layout.replication.primary):
        victim, in_flight = _a_host_with_writes_in_flight(layout)
        layout.isolated_host = victim
        port = str(layout.bouncers[victim].port)
        rules = [["OUTPUT", "--dport", port], ["INPUT", "--sport", port]]
        for chain, direction, value in rules:
            layout.hosts.run_in(
                victim, "iptables", "-I", chain, "-p", "tcp", direction, value, "-j", "DROP"
            )
    try:
        time.sleep(PARTITION_SECONDS)  # the fault's own length
    finally:
        for chain, direction, value in rules:
            layout.hosts.run_in(
                victim, "iptables", "-D", chain, "-p", "tcp", direction, value, "-j", "DROP"
            )
    layout.wait_until_whole()
    return f"{victim}, with {in_flight} write(s) mid-transaction"


def wal_disk_full(layout: Layout, load: WriteLoad) -> str:
    """The primary's WAL volume filled by something else until PostgreSQL cannot write its WAL
    (it stops rather than lose a commit), then freed: Patroni brings it back, and the standby
    resumes streaming from its replication slot."""
    leader = layout.replication.leader()
    log = leader.config.parent / f"{leader.name}-patroni.log"
    seen = log.stat().st_size
    filler = leader.wal_dir / "filler"
    # As much as there is room for (fallocate fails past that, having taken nothing).
    with filler.open("wb") as file, contextlib.suppress(OSError):
        os.posix_fallocate(file.fileno(), 0, shutil.disk_usage(leader.wal_dir).free)

    def full() -> bool:
        # A segment switch after a write: the next WAL goes to a new file, which needs room.
        with contextlib.suppress(peewee.DatabaseError, psycopg2.Error):  # once it has stopped
            leader.server.query(
                "CREATE TABLE IF NOT EXISTS wal_filler (n int); INSERT INTO wal_filler VALUES (1);"
                " SELECT pg_switch_wal()"
            )
        return "No space left on device" in log.read_text(errors="replace")[seen:]

    try:
        wait_for(full, DEADLINE_SECONDS, "the primary to find its WAL volume full")
    finally:
        filler.unlink()
    layout.wait_until_whole()
    return f"{leader.name}'s WAL volume"


SLOW_SECONDS, ADDED_ROUND_TRIP_SECONDS = 20, 0.2


def host_slowed(layout: Layout, load: WriteLoad) -> str:
    """+200 ms on every round trip between one host's PgBouncer and the primary, for
    SLOW_SECONDS: the host's writes slow down; the other host's must not wait on its locks."""
    victim = layout.isolated_host = layout.hosts.names[0]
    path = layout.paths[victim]
    path.delay_seconds = ADDED_ROUND_TRIP_SECONDS
    try:
        time.sleep(SLOW_SECONDS)  # the fault's own length
    finally:
        path.delay_seconds = 0.0
    layout.wait_until_whole()
    return victim


FAULTS = [
    # First: the layout starts on the previous release (fault_suite.py), every other fault then
    # meets this one.
    Fault("this release rolled out under load", release_rolled_out, unseen=True),
    Fault("a host SIGKILLed", host_killed),
    Fault("a host SIGKILLed between a write's work and its commit", host_killed_before_commit),
    Fault("a host SIGTERMed", host_terminated, unseen=True),
    Fault("a host's process group SIGTERMed", host_group_terminated, unseen=True),
    Fault("the primary restarted by Patroni", primary_restarted, database=True),
    Fault(
        "the primary lost for good, its synchronous standby promoted", primary_lost, database=True
    ),
    Fault("the standby stopped", standby_stopped, unseen=True),
    Fault("Redis stopped", redis_stopped, unseen=True),
    Fault("the worker SIGKILLed mid-delivery", worker_killed_mid_delivery, unseen=True),
    Fault("every database connection terminated", connections_terminated, database=True),
    Fault("the connection slots exhausted", slots_exhausted, database=True),
    Fault("a host's PgBouncer SIGKILLed", pgbouncer_killed, database=True),
    Fault(
        "the worker started while its database is down",
        worker_started_without_database,
        database=True,
    ),
    Fault(
        f"a host cut from the database for {PARTITION_SECONDS} s", host_partitioned, database=True
    ),
    Fault(f"+200 ms between a host and the database for {SLOW_SECONDS} s", host_slowed),
    Fault("the primary's WAL disk full, then freed", wal_disk_full, database=True),
]
