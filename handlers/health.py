"""The probes a balancer polls: /healthz (the process is alive) and /readyz (send it traffic:
not draining, the primary answers, its migrations are current, and this host's path to it is not
far slower than other hosts'). Replicas do not count: losing one only moves reads
(docs/database.md)."""

import logging

import flask
import peewee
from connexion.exceptions import ProblemException

from models.db import database, error_summary
from models.migrations import pending

log = logging.getLogger("shopapi.health")

NO_STORE = {"Cache-Control": "no-store"}
# Set once the migrations were found current: later releases only add migrations, so this
# release's stay applied while it runs. Until then each probe asks again (another process may
# be migrating).
MIGRATED = "shopapi.health.migrated"


class NotReady(ProblemException):
    def __init__(self, detail: str):
        super().__init__(
            status=503, title="Service Unavailable", detail=detail, headers=dict(NO_STORE)
        )


def get_liveness():
    return {"status": "alive"}, 200, NO_STORE


def get_readiness():
    app = flask.current_app
    if app.extensions["shopapi.drain"].draining:
        raise NotReady("This instance is shutting down: it finishes what it serves, and no more.")
    # The primary itself, not the routing proxy, which sends a GET's reads to a replica.
    primary = database.obj
    try:
        app.extensions["shopapi.start_up"].run()
        if app.extensions.get(MIGRATED):
            primary.execute_sql("SELECT 1")  # one round trip: the primary answers
        else:
            waiting = pending(primary)  # one round trip too
            if waiting:
                raise NotReady(
                    f"{len(waiting)} database migration(s) pending ({', '.join(waiting)}): "
                    "run `make migrate`."
                )
            app.extensions[MIGRATED] = True
    except (peewee.OperationalError, peewee.InterfaceError) as error:
        # The driver's message names hosts and ports: the log has it, the public answer not.
        log.warning("not ready: the database does not answer: %s", error_summary(error))
        raise NotReady("The database does not answer.") from None
    round_trip = app.extensions["shopapi.round_trip"]
    why_slow = round_trip and round_trip.why_slow()
    if why_slow:
        raise NotReady(f"Out of rotation: {why_slow}.")
    return {"status": "ready"}, 200, NO_STORE
