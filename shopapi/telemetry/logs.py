"""The service's logs: one JSON object per line on stdout, with the request's id and only the
fields a caller passes. More: docs/telemetry.md."""

import datetime
import logging
import sys

import orjson
from asgi_correlation_id import correlation_id


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = correlation_id.get()
        if request_id is not None:
            entry["request_id"] = request_id
        entry.update(getattr(record, "fields", {}))
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


class _StdoutHandler(logging.StreamHandler):
    """Writes to whatever sys.stdout is at the time (a test's captured stdout included)."""

    def __init__(self):
        logging.Handler.__init__(self)

    @property
    def stream(self):
        return sys.stdout


def configure(level: int = logging.INFO) -> None:
    """Send the `shopapi` loggers to stdout as JSON lines (once, however often it is called)."""
    # asgi-correlation-id warns of every X-Request-ID it replaces: any client could flood the log.
    logging.getLogger("asgi_correlation_id").setLevel(logging.ERROR)
    # What a record would carry that the JSON lines do not show, not looked up for every record
    # (the logging HOWTO's "Optimization"): the thread's, process's and multiprocessing's names.
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    logger = logging.getLogger("shopapi")
    logger.setLevel(level)
    logger.propagate = False
    if not any(isinstance(h, _StdoutHandler) for h in logger.handlers):
        handler = _StdoutHandler()
        handler.setFormatter(JsonFormatter())
        logger.addHandler(handler)
