"""What a server does in its database as it starts (the configured admin account), done once the
database answers: a server started during an outage stays up, alive and not ready, and needs no
restart when the database comes back."""

import threading
import time

import peewee

from models.db import database

# Seconds between tries while the database does not answer.
RETRY_SECONDS = 1


class StartUpWork:
    """Jobs to run once each, in order, against the database; retried until each has run."""

    def __init__(self, *jobs):
        self._jobs = [job for job in jobs if job]
        self._lock = threading.Lock()

    @property
    def done(self) -> bool:
        return not self._jobs

    def run(self) -> None:
        """Run what is left; the database's error when it does not answer (what ran is kept)."""
        if self.done:
            return
        with self._lock:
            while self._jobs:
                self._jobs[0]()
                self._jobs.pop(0)

    def finish(self) -> None:
        """Run what is left, trying again every RETRY_SECONDS until the database answers (in a
        thread of its own)."""
        while not self.done:
            try:
                with database.connection_context():
                    self.run()
            except (peewee.OperationalError, peewee.InterfaceError):
                time.sleep(RETRY_SECONDS)
