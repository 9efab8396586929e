"""FCM HTTP v1: `messages:send` to one registration token, authorised by an OAuth 2.0 access
token that a service-account key obtains (an RS256 JWT bearer grant, RFC 7523), kept until
shortly before it expires."""

import threading
import time

import httpx
from jose import jwt

from models import Device
from shopapi.events.push import PushNotification
from shopapi.events.push.outcomes import Outcome, answered, no_answer, since
from shopapi.settings import Settings

SCOPE = "https://www.googleapis.com/auth/firebase.messaging"
GRANT_TYPE = "urn:ietf:params:oauth:grant-type:jwt-bearer"
# An access token is renewed this long before it expires (a send must not carry a stale one).
RENEW_SECONDS = 300


class AccessTokens:
    """The service account's access token, obtained when needed and kept until it is about to
    expire; one at a time for all the worker's threads."""

    def __init__(self, key: dict, client: httpx.Client):
        self._key = key
        self._client = client
        self._lock = threading.Lock()
        self._token: str | None = None
        self._renew_at = 0.0

    def current(self) -> str:
        with self._lock:
            if self._token is None or time.monotonic() >= self._renew_at:
                self._token, lifetime = self._obtain()
                self._renew_at = time.monotonic() + max(lifetime - RENEW_SECONDS, lifetime / 2)
            return self._token

    def forget(self, token: str) -> None:
        """`token` was refused: the next send obtains another."""
        with self._lock:
            if self._token == token:
                self._token = None

    def _obtain(self) -> tuple[str, float]:
        now = int(time.time())
        claims = {
            "iss": self._key["client_email"],
            "scope": SCOPE,
            "aud": self._key["token_uri"],
            "iat": now,
            "exp": now + 3600,
        }
        headers = {"kid": self._key["private_key_id"]} if "private_key_id" in self._key else None
        assertion = jwt.encode(claims, self._key["private_key"], "RS256", headers=headers)
        response = self._client.post(
            self._key["token_uri"], data={"grant_type": GRANT_TYPE, "assertion": assertion}
        )
        if response.status_code != 200:
            raise TokenRefused(f"the token endpoint answered {response.status_code}")
        answer = response.json()
        return answer["access_token"], float(answer.get("expires_in", 3600))


class TokenRefused(Exception):
    """The OAuth token endpoint gave no access token."""


class Fcm:
    def __init__(self, settings: Settings):
        key = settings.fcm_service_account
        self._url = f"{settings.fcm_base_url}/v1/projects/{key['project_id']}/messages:send"
        self._client = httpx.Client(timeout=settings.delivery_timeout_seconds)
        self._tokens = AccessTokens(dict(key), self._client)

    def send(self, device: Device, notification: PushNotification) -> Outcome:
        started = time.monotonic()
        try:
            token = self._tokens.current()
            response = self._client.post(
                self._url,
                json=notification.fcm_message(device.token),
                headers={"Authorization": f"Bearer {token}"},
            )
        except TokenRefused as refused:
            return no_answer(f"no access token: {refused}", started)
        except (httpx.HTTPError, ValueError, KeyError) as error:
            return no_answer(f"connection failed: {error or type(error).__name__}", started)
        code, reason = _error_of(response)
        if response.status_code == 401:
            self._tokens.forget(token)  # expired or revoked early: the next attempt renews it
            return Outcome("retry", 401, reason, since(started))
        return answered(
            response.status_code,
            response.headers.get("Retry-After"),
            reason,
            # FCM's own word for a token that no longer reaches an install (404 UNREGISTERED).
            unregistered=code == "UNREGISTERED" or response.status_code == 404,
            started=started,
        )


def _error_of(response: httpx.Response) -> tuple[str | None, str]:
    """FCM's error code (`error.details[].errorCode`) and a reason to record."""
    try:
        error = response.json().get("error", {})
    except ValueError:
        return None, f"{response.status_code} {response.text[:200]}"
    codes = [d.get("errorCode") for d in error.get("details", []) if isinstance(d, dict)]
    code = next((c for c in codes if c), None) or error.get("status")
    return code, f"{response.status_code} {code or ''} {error.get('message', '')}".strip()
