"""The read replicas: each one's pool, whether it answers, and how far behind the primary it is,
checked by a thread of each process every CHECK_EVERY seconds, off the requests' path. Which
replica a read may use: docs/database.md."""

import collections
import contextlib
import itertools
import logging
import os
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import peewee

from models.background import repeat
from models.bounds import UNBOUNDED, Bounds
from models.db import open_database, postgresql_arguments
from models.routing import WAL_POSITION

log = logging.getLogger("shopapi.database")

CHECK_EVERY = 0.25
# A check waits this long for a connection or an answer: a replica slower than this is down.
CHECK_TIMEOUT_SECONDS = 1
CHECK_DEAD_SECONDS = 5
# Where a replica has replayed the WAL to (NULL on a server that is not in recovery: then where
# it writes, so that a primary named as a replica counts as current), and whether it receives
# WAL: a standby whose primary removed the WAL it needs still answers, replaying nothing.
# `status` is NULL to a role without pg_read_all_stats: then a receiver running counts.
REPLAY_POSITION = (
    "SELECT pg_wal_lsn_diff(COALESCE(pg_last_wal_replay_lsn(), pg_current_wal_lsn()), '0/0')"
    "::bigint, COALESCE((SELECT COALESCE(status = 'streaming', true) FROM pg_stat_wal_receiver),"
    " NOT pg_is_in_recovery())"
)


# The checks' statement timeout, set per check: PgBouncer refuses it as a startup parameter
# (`options`), and a session's SET would outlive the check on a pooled server connection.
# Two statements in one query are one transaction, which SET LOCAL lasts for.
TIMEOUT = f"SET LOCAL statement_timeout = {CHECK_TIMEOUT_SECONDS * 1000}; "


def checker(url: str, application_name: str = "shopapi replica check"):
    """A connection of its own for the checks: never one a request waits for. One whose server
    stopped acknowledging (a dead host, a partition) fails within CHECK_DEAD_SECONDS, rather
    than hold its thread until TCP gives up, minutes later."""
    arguments = {
        **postgresql_arguments(url),
        "connect_timeout": CHECK_TIMEOUT_SECONDS,
        "tcp_user_timeout": CHECK_DEAD_SECONDS * 1000,
        "application_name": application_name,
    }
    return peewee.PostgresqlDatabase(**arguments)


def one_row(checker: peewee.PostgresqlDatabase, sql: str) -> tuple:
    """`sql`'s one row from `checker`, reconnecting if its connection was lost."""
    try:
        if checker.is_closed():
            checker.connect()
        return checker.execute_sql(TIMEOUT + sql).fetchone()
    except (peewee.DatabaseError, peewee.InterfaceError):
        checker.close()
        raise


class Replica:
    def __init__(self, url: str, pool_size: int, bounds: Bounds):
        parts = urlsplit(url)
        # For logs and metrics: where it is, without its password.
        self.name = f"{parts.hostname}:{parts.port or 5432}{parts.path}"
        self.database = open_database(url, pool_size, bounds=bounds)
        self.checker = checker(url)
        self.up = False  # until its first check answers
        self.streaming = False  # whether it receives WAL from a primary
        self.replayed = -1  # the WAL position it has replayed to
        self.lag_seconds = float("inf")
        # Since when it has been behind, and the primary's position then: the lag outlives the
        # few seconds of the primary's positions kept, for a replica that stopped replaying.
        self.behind: tuple[float, int] | None = None


class Replicas:
    """The replicas of `primary_url`, each skipped while it is down or more than
    `max_lag_seconds` behind the primary. `observe(replica)` is told of each check (metrics)."""

    def __init__(
        self,
        primary_url: str,
        urls,
        pool_size: int,
        max_lag_seconds: float,
        bounds: Bounds = UNBOUNDED,
        observe: Callable[[Replica], None] = lambda replica: None,
    ):
        self.members = [Replica(url, pool_size, bounds) for url in urls]
        self.max_lag_seconds = max_lag_seconds
        self._observe = observe
        self._primary = checker(primary_url)
        # The primary's WAL position at each check, as long as a lag within the bound can need.
        self._history: collections.deque[tuple[float, int]] = collections.deque()
        self._turns = itertools.count()
        self._checking_in: int | None = None  # the process whose thread checks (gunicorn forks)

    def choose(self, written_at: int | None) -> peewee.Database | None:
        """A replica that is up, within the lag bound and, when the caller wrote at
        `written_at`, has replayed that far; in turns. None: the primary must answer."""
        if self._checking_in != os.getpid():
            self._start_checking()
        usable = [
            replica
            for replica in self.members
            if replica.up
            and replica.lag_seconds <= self.max_lag_seconds
            and (written_at is None or replica.replayed >= written_at)
        ]
        if not usable:
            return None
        return usable[next(self._turns) % len(usable)].database

    def failed(self, database: peewee.Database, error: Exception) -> None:
        """A request's query failed on `database`: if the connection failed, skip that replica
        until its next check answers."""
        if not isinstance(error, peewee.OperationalError | peewee.InterfaceError):
            return
        for replica in self.members:
            if replica.database is database and replica.up:
                replica.up = False
                log.warning("replica %s failed, reads go elsewhere: %s", replica.name, error)

    def check(self) -> None:
        """Read the primary's WAL position, then each replica's, and work out each lag."""
        now = time.monotonic()
        # If the primary does not answer, the replicas are judged against what it last said.
        with contextlib.suppress(peewee.DatabaseError, peewee.InterfaceError):
            self._history.append((now, one_row(self._primary, WAL_POSITION)[0]))
        keep = self.max_lag_seconds + 2 * CHECK_EVERY + 1
        while len(self._history) > 1 and self._history[0][0] < now - keep:
            self._history.popleft()
        for replica in self.members:
            self._check(replica)
            self._observe(replica)

    def _check(self, replica: Replica) -> None:
        try:
            replica.replayed, streaming = one_row(replica.checker, REPLAY_POSITION)
        except (peewee.DatabaseError, peewee.InterfaceError) as error:
            if replica.up:
                log.warning("replica %s is down, reads go elsewhere: %s", replica.name, error)
            replica.up, replica.streaming, replica.lag_seconds = False, False, float("inf")
            return
        if streaming != replica.streaming and replica.up:
            says = "receives WAL again" if streaming else "receives no WAL: it falls behind"
            log.log(
                logging.INFO if streaming else logging.WARNING, "replica %s %s", replica.name, says
            )
        replica.streaming = streaming
        replica.lag_seconds = self._lag(replica)
        if not replica.up:
            log.info("replica %s answers, %.1f s behind", replica.name, replica.lag_seconds)
        replica.up = True

    def _lag(self, replica: Replica) -> float:
        """How long ago the primary first had WAL that the replica has not replayed: 0 if it has
        replayed all the primary had at the last check."""
        first = next(((at, pos) for at, pos in self._history if pos > replica.replayed), None)
        if first is None:
            replica.behind = None
            return 0.0
        if replica.behind is None or replica.replayed >= replica.behind[1]:
            replica.behind = first  # behind since then; what it lacked before, it has
        return time.monotonic() - replica.behind[0]

    def _start_checking(self) -> None:
        self._checking_in = os.getpid()
        repeat(self.check, CHECK_EVERY, "replica-checks")
