"""APNs: the provider API over HTTP/2 (`POST /3/device/<token>`), with token-based
authentication (an ES256 JWT of the team and key, renewed every 50 minutes)."""

import ssl
import threading
import time

import httpx
import orjson
from jose import jwt

from models import Device
from shopapi.events.push import PushNotification
from shopapi.events.push.outcomes import Outcome, answered, no_answer, since
from shopapi.settings import Settings

# Apple refuses a provider token older than an hour, and one renewed more often than every
# 20 minutes.
TOKEN_SECONDS = 50 * 60
# The reasons (besides 410 Unregistered) that say the token reaches no app.
INVALID_TOKEN_REASONS = ("BadDeviceToken", "Unregistered")


class Apns:
    def __init__(self, settings: Settings):
        self._base = settings.apns_base_url
        self._key, self._key_id = settings.apns_key, settings.apns_key_id
        self._team, self._topic = settings.apns_team_id, settings.apns_topic
        tls = ssl.create_default_context(cafile=settings.apns_ca_file)
        self._client = httpx.Client(
            http1=False, http2=True, verify=tls, timeout=settings.delivery_timeout_seconds
        )
        self._lock = threading.Lock()
        self._token: str | None = None
        self._token_made = 0.0

    def _provider_token(self) -> str:
        with self._lock:
            if self._token is None or time.monotonic() - self._token_made >= TOKEN_SECONDS:
                claims = {"iss": self._team, "iat": int(time.time())}
                headers = {"kid": self._key_id}
                self._token = jwt.encode(claims, self._key, algorithm="ES256", headers=headers)
                self._token_made = time.monotonic()
            return self._token

    def _forget(self, token: str) -> None:
        with self._lock:
            if self._token == token:
                self._token = None

    def send(self, device: Device, notification: PushNotification) -> Outcome:
        started = time.monotonic()
        token = self._provider_token()
        headers = {
            "authorization": f"bearer {token}",
            "apns-topic": self._topic,
            "apns-push-type": "alert",
            "apns-priority": "10",
            # A newer notification of the same order replaces this one on the device.
            "apns-collapse-id": notification.collapse_key[:64],
        }
        body = orjson.dumps(notification.apns_payload())
        try:
            response = self._client.post(
                f"{self._base}/3/device/{device.token}", content=body, headers=headers
            )
        except httpx.HTTPError as error:
            return no_answer(f"connection failed: {error or type(error).__name__}", started)
        reason = _reason_of(response)
        if reason == "ExpiredProviderToken":
            self._forget(token)  # the next attempt carries a new one
            return Outcome("retry", response.status_code, reason, since(started))
        return answered(
            response.status_code,
            response.headers.get("retry-after"),
            f"{response.status_code} {reason}".strip(),
            unregistered=response.status_code == 410 or reason in INVALID_TOKEN_REASONS,
            started=started,
        )


def _reason_of(response: httpx.Response) -> str:
    """APNs's `reason` (`{"reason": "BadDeviceToken"}`), or nothing."""
    if not response.content:
        return ""
    try:
        return str(orjson.loads(response.content).get("reason", ""))
    except (orjson.JSONDecodeError, AttributeError):
        return response.text[:200]
