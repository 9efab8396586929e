"""What came of one attempt of a push delivery: each transport reads its service's answer as
that service defines it, and this makes it a verdict (docs/events.md, Push)."""

import dataclasses
import datetime
import email.utils
import re
import time

# A Retry-After longer than this is taken as this: the delivery is retried, not parked for days.
MAX_RETRY_AFTER_SECONDS = 3600
_DELAY_SECONDS = re.compile("[0-9]+")


@dataclasses.dataclass(frozen=True)
class Outcome:
    """`delivered`, `retry`, `unregistered` (the token is no longer valid) or `failed`; the
    service's status (None when it gave none) and, but on delivery, why."""

    verdict: str
    status: int | None
    error: str | None
    duration_ms: int
    retry_after: float | None = None

    @property
    def recorded(self) -> dict:
        return {
            "duration_ms": self.duration_ms,
            "response_status": self.status,
            "error": self.error,
        }


def since(started: float) -> int:
    return round((time.monotonic() - started) * 1000)


def no_answer(error: str, started: float) -> Outcome:
    """No answer (refused, timeout, connection lost): tried again."""
    return Outcome("retry", None, error, since(started))


def answered(
    status: int, retry_after: str | None, reason: str, unregistered: bool, started: float
) -> Outcome:
    """The verdict on a service's answer: 2xx delivered; a token the service says is invalid
    (`unregistered`) removes the device; 429 and 5xx are tried again, not before `Retry-After`;
    anything else fails the delivery, with the service's `reason`."""
    took = since(started)
    if 200 <= status < 300:
        return Outcome("delivered", status, None, took)
    if unregistered:
        return Outcome("unregistered", status, f"the token is no longer valid: {reason}", took)
    if status == 429 or status >= 500:
        return Outcome("retry", status, reason, took, _seconds(retry_after))
    return Outcome("failed", status, reason, took)


def _seconds(retry_after: str | None) -> float | None:
    """RFC 9110 10.2.3's Retry-After: delay-seconds (ASCII digits: `str.isdigit` also takes
    `²`, which `float` refuses), or an HTTP date; None when absent or unreadable."""
    if not retry_after:
        return None
    retry_after = retry_after.strip()
    if _DELAY_SECONDS.fullmatch(retry_after):
        return min(float(retry_after), MAX_RETRY_AFTER_SECONDS)
    try:
        when = email.utils.parsedate_to_datetime(retry_after)
        if when.tzinfo is None:
            # An HTTP date is GMT (RFC 9110 5.6.7); email.utils leaves `-0000` and a date
            # without a zone naive.
            when = when.replace(tzinfo=datetime.UTC)
        left = (when - datetime.datetime.now(datetime.UTC)).total_seconds()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return min(max(left, 0.0), MAX_RETRY_AFTER_SECONDS)
