"""Which X-Request-ID asgi-correlation-id keeps (`is_sane_request_id`) and how it makes a new one
(`new_request_id`). Why: docs/telemetry.md."""

import re
import uuid

# Anything else (too long, control characters, spaces) could forge log lines: replace it. The
# library's own check takes only UUIDs: it would replace ids such as `abc-123` that clients send.
_SANE = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def is_sane_request_id(offered: str) -> bool:
    return _SANE.fullmatch(offered) is not None


def new_request_id() -> str:
    return uuid.uuid4().hex
