"""Webhooks: partners and admins register URLs that receive the events they may see; the worker
(shopapi/events/worker.py) delivers them. A caller reaches only its own webhooks unless it has
`admin`.
"""

import peewee
from connexion.exceptions import Forbidden

from models import Delivery, DeliveryAttempt, Event, Webhook
from models.errors import InvalidReference
from shopapi.auth.security import current_principal
from shopapi.events import webhook_signatures, webhook_targets
from shopapi.web.configured import configured
from shopapi.web.etags import if_match
from shopapi.web.listing import list_response
from shopapi.web.problems import ValidationProblem
from shopapi.web.representations import current_version
from shopapi.web.responses import created


def represent(webhook: Webhook) -> dict:
    return {
        "id": webhook.id,
        "url": webhook.url,
        "events": webhook.events,
        "description": webhook.description,
        "enabled": webhook.enabled,
        "disabled_reason": webhook.disabled_reason,
        "api_version": webhook.api_version,
        "owner_id": webhook.owner_id,
        "created_at": webhook.created_at,
        "updated_at": webhook.updated_at,
    }


def represent_delivery(delivery: Delivery) -> dict:
    return {
        "id": delivery.id,
        "event_id": delivery.event_id,
        "status": delivery.status,
        "next_attempt_at": delivery.next_attempt_at,
        "attempts": [
            {
                "number": attempt.number,
                "attempted_at": attempt.attempted_at,
                "duration_ms": attempt.duration_ms,
                "response_status": attempt.response_status,
                "error": attempt.error,
            }
            for attempt in sorted(delivery.attempt_log, key=lambda attempt: attempt.number)
        ],
        "created_at": delivery.created_at,
        "updated_at": delivery.updated_at,
    }


def _reachable():
    return current_principal().only_reachable(Webhook.select(), Webhook.owner)


def _webhook(id: int) -> Webhook:
    return _reachable().where(Webhook.id == id).get()


def _changeable(id: int) -> Webhook:
    """Your webhook, locked for a change that the request's If-Match allows."""
    _webhook(id)  # 404 unless the caller reaches it, whatever the condition
    return if_match(Webhook.get_for_update(id), represent)


def _check_url(body: dict) -> None:
    if "url" not in body:
        return
    allow_private = configured().settings.webhook_allow_private
    refusal = webhook_targets.refusal(body["url"], allow_private)
    if refusal:
        raise ValidationProblem([{"pointer": "/url", "detail": f"The URL {refusal}."}])


def with_attempts(attempt_model):
    """Fetch deliveries with their attempts (`attempt_model`), in two queries rather than one
    per delivery."""
    return lambda deliveries: peewee.prefetch(deliveries, attempt_model.select())


def list_webhooks(**params):
    # Without admin, the caller's own: their list's tag moves with their own webhooks alone.
    owners = current_principal().owners_reached()
    return list_response(Webhook, _reachable(), params, represent, owners=owners)


def create_webhook(body):
    principal = current_principal()
    if principal.user_id is None and not principal.is_admin:
        raise Forbidden("These credentials act for no user, whose events a webhook would get.")
    _check_url(body)
    secret = webhook_signatures.new_secret()
    webhook = Webhook(owner=principal.user_id, secret=secret, api_version=current_version())
    webhook.replace(body)
    webhook.save()
    return created({**represent(webhook), "secret": secret}, webhook.id)


def get_webhook(id):
    return represent(_webhook(id))


def update_webhook(id, body):
    webhook = _changeable(id)
    _check_url(body)
    changed = webhook.assign(body)
    if body.get("enabled") and webhook.disabled_reason is not None:
        webhook.disabled_reason, changed = None, True
    if changed:
        webhook.save()
    return represent(webhook)


def delete_webhook(id):
    _changeable(id).delete_instance()  # its deliveries go with it (ON DELETE CASCADE)


def list_webhook_deliveries(webhook_id, **params):
    webhook = _webhook(webhook_id)
    deliveries = Delivery.select().where(Delivery.webhook == webhook)
    # A partner's webhook: its tag moves with that partner's deliveries alone (an admin's
    # webhook, which no one owns, with everyone's).
    owners = None if webhook.owner_id is None else (webhook.owner_id,)
    return list_response(
        Delivery,
        deliveries,
        params,
        represent_delivery,
        fetch=with_attempts(DeliveryAttempt),
        reads=(DeliveryAttempt, Webhook),  # and the webhook, read first
        owners=owners,
    )


def get_webhook_delivery(webhook_id, id):
    webhook = _webhook(webhook_id)
    return represent_delivery(Delivery.get((Delivery.webhook == webhook) & (Delivery.id == id)))


def redeliver(webhook_id, body):
    webhook = _webhook(webhook_id)
    event = Event.get_or_none(Event.id == body["event_id"])
    if event is None or not webhook.viewer.sees(event.owner_id):
        raise InvalidReference(
            "/event_id", f"There is no event {body['event_id']} for this webhook."
        )
    if event.type not in webhook.events:
        raise InvalidReference("/event_id", f"This webhook does not take {event.type} events.")
    delivery = Delivery.of(webhook, event)
    return created(represent_delivery(delivery), delivery.id)
