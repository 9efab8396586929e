"""One POST of one event to one webhook, signed (Standard Webhooks), and what came of it: to a
vetted public address, within one deadline, no redirects (shopapi/events/outbound.py).
"""

import dataclasses
import time

import orjson

from models import Event, Webhook
from shopapi.events import outbound
from shopapi.events.payloads import event_payload
from shopapi.events.webhook_signatures import headers as signature_headers
from shopapi.settings import Settings
from shopapi.web.jsonifier import OPTIONS
from shopapi.web.representations import Shape

USER_AGENT = "shopapi-webhooks/1"


@dataclasses.dataclass(frozen=True)
class Outcome:
    """The receiver's status, or `error` when there was no answer (refused, timeout, ...)."""

    status: int | None
    error: str | None
    duration_ms: int


def post(
    webhook: Webhook, event: Event, settings: Settings, event_shapes: dict[int, Shape | None]
) -> Outcome:
    """POST `event` to `webhook` once, within DELIVERY_TIMEOUT_SECONDS all told, shown as the
    version the webhook was registered through shows it (`event_shapes`, by version). Who acted
    is in the payload only for a webhook whose owner is (now) an admin."""
    payload = event_payload(event, shows_actor=webhook.owner_is_admin)
    shape = event_shapes.get(webhook.api_version)
    if shape is not None:
        payload = shape(payload)
    body = orjson.dumps(payload, option=OPTIONS)
    sent = outbound.attempt(
        webhook.url,
        _request_headers(webhook, event, body),
        body,
        allow_private=settings.webhook_allow_private,
        timeout=settings.delivery_timeout_seconds,
    )
    status = sent.answer.status if sent.answer else None
    return Outcome(status, sent.error, sent.duration_ms)


def _request_headers(webhook: Webhook, event: Event, body: bytes) -> dict[str, str]:
    # The event's message id, the same on every attempt: receivers drop duplicates by it.
    signed = signature_headers(webhook.secret, event.message_id, int(time.time()), body)
    return {"Content-Type": "application/json", "User-Agent": USER_AGENT, **signed}
