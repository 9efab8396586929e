"""What a database error means for the work that raised it, by its SQLSTATE: lost to a concurrent
transaction (run it again), out of time (a bound of models/bounds.py), or the database away."""

# serialization_failure, deadlock_detected: the server rolled the transaction back so that a
# concurrent one could go on; the same work run again succeeds.
CONFLICTED = {"40001", "40P01"}
# lock_not_available (lock_timeout), query_canceled (statement_timeout, or an operator's
# cancel), idle_in_transaction_session_timeout: the work was rolled back.
TIMED_OUT = {"55P03", "57014", "25P03"}


def sqlstate(error: BaseException) -> str | None:
    """The SQLSTATE of `error` (Peewee's, wrapping the driver's as its first argument), if the
    server sent one."""
    for candidate in (error, *error.args[:1], error.__cause__, error.__context__):
        code = getattr(candidate, "pgcode", None)
        if code:
            return code
    return None


def conflicted(error: BaseException) -> bool:
    return sqlstate(error) in CONFLICTED


def timed_out(error: BaseException) -> bool:
    return sqlstate(error) in TIMED_OUT
