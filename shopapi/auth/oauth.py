"""The OAuth 2.0 token endpoint's protocol (RFC 6749): client authentication, the password,
client_credentials and refresh_token grants, and the errors as RFC 6749's JSON, which OAuth
client libraries understand, rather than problem details."""

import base64
import binascii
import dataclasses
from urllib.parse import unquote_plus

from models import OAuthClient, RefreshToken, Revocation, User
from models.refresh_token import Issued, RefreshTokenReused
from models.user import ROLE_SCOPES, SCOPES, normalised_email
from shopapi.auth.credential_attempts import limited_attempt
from shopapi.auth.tokens import CREDENTIALS_VERSION, LOGIN, AccessTokens

_NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
# What the key deriving refresh tokens' successors is for (AccessTokens.derived_key).
SUCCESSOR_KEY_PURPOSE = "refresh token successors"


class OAuthError(Exception):
    def __init__(self, error: str, description: str, status: int = 400, headers=None):
        super().__init__(description)
        self.error, self.description = error, description
        self.status, self.headers = status, headers or {}

    def answer(self) -> tuple[dict, int, dict]:
        """RFC 6749 5.2's JSON error: body, status, headers."""
        body = {"error": self.error, "error_description": self.description}
        return body, self.status, {**_NO_STORE, **self.headers}


def _scopes_asked(body: dict, allowed: frozenset[str]) -> frozenset[str]:
    """The scopes the request narrows the token to, all of `allowed` when it names none."""
    asked = frozenset(body.get("scope", "").split())
    if not asked:
        return allowed
    beyond = sorted(asked - allowed)
    if beyond:
        unknown = [s for s in beyond if s not in SCOPES]
        reason = "unknown" if unknown else "not granted to these credentials"
        raise OAuthError("invalid_scope", f"Scope {' '.join(beyond)}: {reason}.")
    return asked


def _client(body: dict, authorization: str) -> OAuthClient | None:
    """The authenticated client, None when the request names none; invalid_client when it names
    one that does not authenticate."""
    basic = authorization[:6].lower() == "basic "
    if basic:
        if "client_secret" in body:
            raise OAuthError("invalid_request", "Authenticate the client one way, not two.")
        try:
            pair = base64.b64decode(authorization[6:].strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            pair = ""
        client_id, _, secret = (unquote_plus(part) for part in pair.partition(":"))
    else:
        client_id, secret = body.get("client_id", ""), body.get("client_secret", "")
    if not client_id and not secret:
        # No client, or Swagger UI's empty `Basic Og==` (":") when its client fields are blank.
        return None
    # No client id holds a NUL (PostgreSQL could not even look one up); the form's are refused
    # by validation, Basic's are here.
    named = client_id and secret and "\x00" not in client_id
    client = OAuthClient.authenticate(client_id, secret) if named else None
    if client is None:
        challenge = {"WWW-Authenticate": 'Basic realm="shopapi"'} if basic else {}
        raise OAuthError("invalid_client", "The client could not be authenticated.", 401, challenge)
    return client


def _required(body: dict, *names: str) -> None:
    missing = [name for name in names if not body.get(name)]
    if missing:
        raise OAuthError("invalid_request", f"Missing {', '.join(missing)}.")


@dataclasses.dataclass(frozen=True)
class TokenEndpoint:
    """Answers token requests with access tokens signed by `tokens` and refresh tokens that live
    `refresh_token_ttl` seconds."""

    tokens: AccessTokens
    refresh_token_ttl: int

    def answer(self, body: dict, authorization: str) -> tuple[dict, int, dict]:
        """The response (body, status, headers) to a token request: its form `body` and its
        `Authorization` header ("" when it has none)."""
        try:
            _required(body, "grant_type")
            grant = _GRANTS.get(body["grant_type"])
            if grant is None:
                raise OAuthError("unsupported_grant_type", f"Grant types: {', '.join(_GRANTS)}.")
            return grant(self, body, _client(body, authorization))
        except OAuthError as error:
            return error.answer()

    def _tokens_answer(self, subject: str, scopes: frozenset[str], **claims):
        body = {
            "access_token": self.tokens.issue(subject, scopes, **claims),
            "token_type": "Bearer",
            "expires_in": self.tokens.ttl,
            "scope": " ".join(sorted(scopes)),
        }
        return body, 200, _NO_STORE

    def _user_tokens_answer(
        self, user_id: int, scopes: frozenset[str], refresh: Issued, credentials_version: int
    ):
        """An access token of the login `refresh` belongs to, issued with it, and `refresh`."""
        body, status, headers = self._tokens_answer(
            str(user_id),
            scopes,
            issued_at=int(refresh.at.timestamp()),
            **{CREDENTIALS_VERSION: credentials_version, LOGIN: refresh.family},
        )
        return {**body, "refresh_token": refresh.secret}, status, headers

    def _password_grant(self, body: dict, client: OAuthClient | None):
        _required(body, "username", "password")
        user = User.with_email(body["username"])
        # Wrong passwords are limited per account (the spec's x-rate-limit-failed-login-*),
        # whether it exists or not: over a limit the answer is 429 and the password is not
        # checked. An account is counted under its user, an email no user has under the email:
        # what was tried on it does not follow it to the account created with it later.
        account = f"user:{user.id}" if user else f"email:{normalised_email(body['username'])}"
        with limited_attempt(account) as attempt:
            if not User.logs_in(user, body["password"]):
                attempt.failed()
                # One answer whether the email is unknown or the password wrong.
                raise OAuthError("invalid_grant", "The email or password is wrong.")
        allowed = ROLE_SCOPES[user.role]
        if client is not None:
            allowed &= frozenset(client.scopes.split())
        scopes = _scopes_asked(body, allowed)
        client_id = client.client_id if client else None
        refresh = RefreshToken.start(
            user, " ".join(sorted(scopes)), client_id, self.refresh_token_ttl
        )
        return self._user_tokens_answer(user.id, scopes, refresh, user.credentials_version)

    def _client_credentials_grant(self, body: dict, client: OAuthClient | None):
        if client is None:
            raise OAuthError("invalid_client", "This grant needs the client's credentials.", 401)
        scopes = _scopes_asked(body, frozenset(client.scopes.split()))
        return self._tokens_answer(f"client:{client.client_id}", scopes, client_id=client.client_id)

    def _refresh_token_grant(self, body: dict, client: OAuthClient | None):
        _required(body, "refresh_token")
        client_id = client.client_id if client else None
        current = RefreshToken.find(body["refresh_token"])
        if current is None or current.client_id != client_id:
            raise OAuthError("invalid_grant", "The refresh token is unknown, expired or revoked.")
        # The successor keeps the login's scopes; the access token may narrow them (checked
        # before the token is used up), and never exceeds what the user's role allows now.
        granted = frozenset(current.scope.split()) & ROLE_SCOPES[current.user.role]
        scopes = _scopes_asked(body, granted)
        key = self.tokens.derived_key(SUCCESSOR_KEY_PURPOSE)
        try:
            successor = RefreshToken.rotate(
                current, body["refresh_token"], key, self.refresh_token_ttl
            )
        except RefreshTokenReused:
            Revocation.end_login(current)
            raise OAuthError(
                "invalid_grant",
                "The refresh token was used already; every token of its login is now revoked.",
            ) from None
        except LookupError:
            raise OAuthError(
                "invalid_grant", "The refresh token is unknown, expired or revoked."
            ) from None
        return self._user_tokens_answer(
            current.user_id, scopes, successor, current.credentials_version
        )


_GRANTS = {
    "password": TokenEndpoint._password_grant,
    "client_credentials": TokenEndpoint._client_credentials_grant,
    "refresh_token": TokenEndpoint._refresh_token_grant,
}
