"""How long the app's PostgreSQL sessions may take: statement, lock and idle-in-transaction
timeouts and TCP's, on every connection whatever its pooler. Values and their order:
docs/database.md ("Timeouts")."""

import dataclasses
import logging

import psycopg2

from models.pool import IdleCheckedPool

log = logging.getLogger("shopapi.database")

# What PgBouncer (1.18, Debian's) answers a connection that sends the `options` startup
# parameter, unless its ignore_startup_parameters lists it (then it drops them unapplied).
OPTIONS_REFUSED = "unsupported startup parameter: options"


@dataclasses.dataclass(frozen=True)
class Bounds:
    """Each in seconds; 0 sets none (the server's, or the role's, applies)."""

    statement_timeout: float = 0
    lock_timeout: float = 0
    idle_in_transaction_timeout: float = 0
    tcp_timeout: float = 0

    @classmethod
    def configured(cls, settings) -> "Bounds":
        """The bounds `settings` (shopapi.settings.Settings) give."""
        return cls(
            statement_timeout=settings.database_statement_timeout_seconds,
            lock_timeout=settings.database_lock_timeout_seconds,
            idle_in_transaction_timeout=settings.database_idle_in_transaction_timeout_seconds,
            tcp_timeout=settings.database_tcp_timeout_seconds,
        )

    def session_settings(self) -> dict[str, int]:
        """The server's settings for a session (or a transaction), in milliseconds."""
        settings = {
            "statement_timeout": _ms(self.statement_timeout),
            "lock_timeout": _ms(self.lock_timeout),
            "idle_in_transaction_session_timeout": _ms(self.idle_in_transaction_timeout),
        }
        return {name: value for name, value in settings.items() if value}

    def options(self) -> str:
        """libpq's `options`: the session's settings, and the server's side of TCP's."""
        server_tcp = {}
        if self.tcp_timeout:
            idle, interval, count = _keepalives(self.tcp_timeout)
            server_tcp = {
                "tcp_keepalives_idle": idle,
                "tcp_keepalives_interval": interval,
                "tcp_keepalives_count": count,
                "tcp_user_timeout": _ms(self.tcp_timeout),
            }
        settings = {**self.session_settings(), **server_tcp}
        return " ".join(f"-c {name}={value}" for name, value in settings.items())

    def set_local(self) -> str:
        """The session's settings for one transaction: SQL to send with its BEGIN."""
        return "; ".join(
            f"SET LOCAL {name} = {value}" for name, value in self.session_settings().items()
        )

    def connect_parameters(self) -> dict[str, int]:
        """libpq's side of TCP's: keepalives on an idle connection, and how long what it sent
        may stay unacknowledged (a server cut off mid-query) before the connection is dropped."""
        if not self.tcp_timeout:
            return {}
        idle, interval, count = _keepalives(self.tcp_timeout)
        return {
            "keepalives": 1,
            "keepalives_idle": idle,
            "keepalives_interval": interval,
            "keepalives_count": count,
            "tcp_user_timeout": _ms(self.tcp_timeout),
        }


# No bound at all: PostgreSQL's defaults (tools and benches that open a database of their own).
UNBOUNDED = Bounds()


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def _keepalives(timeout: float) -> tuple[int, int, int]:
    """Keepalive idle time, interval and count (whole seconds) that give up within `timeout`."""
    step = max(1, int(timeout / 4))
    return step, step, 3


class BoundedPool(IdleCheckedPool):
    """The app's PostgreSQL pool, every session of it bounded by `bounds`: through `options` at
    connection, which covers every statement; or, where a pooler refuses them (PgBouncer, which
    would lend one server session to many clients), with `SET LOCAL` sent in the query of each
    BEGIN, which costs no round trip and lasts as long as PgBouncer lends the session."""

    def __init__(self, *args, bounds: Bounds, **kwargs):
        super().__init__(*args, **bounds.connect_parameters(), **kwargs)
        self.bounds = bounds
        self.options_refused = False
        self._begin = f"BEGIN; {bounds.set_local()}" if bounds.session_settings() else "BEGIN"

    def _connect(self):
        if self.options_refused or not self.bounds.options():
            return super()._connect()
        self.connect_params["options"] = self.bounds.options()
        try:
            return super()._connect()
        except psycopg2.OperationalError as error:
            if OPTIONS_REFUSED not in str(error):
                raise
        # Remembered for the pool's life: a pooler answers every connection alike.
        self.options_refused = True
        del self.connect_params["options"]
        log.info(
            "the database's pooler refuses connection options: each transaction sets its "
            "timeouts; bound single statements at the role (docs/database.md, Timeouts)"
        )
        return super()._connect()

    def begin(self, isolation_level=None):
        if not self.options_refused or isolation_level:  # the app names no isolation level
            return super().begin(isolation_level)
        self.execute_sql(self._begin)
