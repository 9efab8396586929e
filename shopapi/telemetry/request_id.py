"""X-Request-ID: asgi-correlation-id's CorrelationIdMiddleware (registered in app.py, outermost,
so every response carries the header, errors included) keeps the client's id when it passes
`is_sane_request_id`, else makes a `new_request_id`. Every layer and log line reads the id from
the library's `correlation_id` context variable."""

import re
import uuid

# Anything else (too long, control characters, spaces) could forge log lines: replace it. The
# library's own check takes only UUIDs: it would replace ids such as `abc-123` that clients send.
_SANE = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def is_sane_request_id(offered: str) -> bool:
    return _SANE.fullmatch(offered) is not None


def new_request_id() -> str:
    return uuid.uuid4().hex
