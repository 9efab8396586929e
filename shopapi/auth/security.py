"""Who is calling: the checks Connexion runs for the spec's security schemes (bearer tokens, API
keys, the metrics token), and the principal the handlers then see. Why scopes are checked as
they are: docs/auth.md."""

import dataclasses
import hmac
import weakref
from collections.abc import Iterable

import connexion
from connexion.exceptions import OAuthProblem, OAuthScopeProblem

from models import ApiKey, off_loop
from models.db import database
from models.revocation import api_key_family
from models.user import ROLE_SCOPES
from models.visibility import Viewer
from shopapi.auth.revocations import Revocations
from shopapi.auth.tokens import (
    CREDENTIALS_VERSION,
    LOGIN,
    AccessTokens,
    InvalidToken,
    user_id_of,
)
from shopapi.internals import connexion as connexion_internals


@dataclasses.dataclass(frozen=True)
class _Keys:
    tokens: AccessTokens
    metrics_token: str | None
    revocations: Revocations


_keys_of: "weakref.WeakKeyDictionary[object, _Keys]" = weakref.WeakKeyDictionary()

REALM = "shopapi"


# Connexion's handler for each scheme type, reading signatures once (FlaskApp(security_map=...)).
SECURITY_MAP = connexion_internals.security_handlers_reading_signatures_once()


def with_api_key_scopes(requirement_lists: Iterable[list[dict]]) -> None:
    """Give each `apiKey` requirement of these lists (a spec's: contract/operations.py's
    `security_requirements`, which app.py hands over) the scopes of the `oauth2` requirement
    beside it, in place. OpenAPI 3.0 allows scopes only on OAuth schemes, so the contract lists
    none for API keys and says that a key needs the operation's OAuth scopes; Connexion passes a
    requirement's scopes to `api_key_info`, which checks them."""
    for requirements in requirement_lists:
        oauth_scopes = next((r["oauth2"] for r in requirements if "oauth2" in r), [])
        for requirement in requirements:
            if requirement.get("apiKey") == []:
                requirement["apiKey"] = list(oauth_scopes)


def install(
    app: connexion.FlaskApp,
    tokens: AccessTokens,
    metrics_token: str | None,
    revocations: Revocations,
) -> None:
    """Make `tokens` the keys of `app`'s security checks and handlers, `metrics_token` the one
    that reads its metrics, and `revocations` what they know of revoked tokens."""
    _keys_of[app.middleware] = _Keys(tokens, metrics_token, revocations)


def revocations_of(app: connexion.FlaskApp) -> Revocations:
    """What `app` knows of revoked tokens."""
    return _keys_of[app.middleware].revocations


def tokens_of(scope) -> AccessTokens:
    """The token keys of the app serving this ASGI request scope."""
    return _keys_of[scope["app"]].tokens


@dataclasses.dataclass(frozen=True)
class Principal(Viewer):
    """The caller. `user_id` is the user it acts as (None for an OAuth client or an external
    system); without the `admin` scope it reaches only that user's record and orders (what it
    sees: models/visibility.py)."""

    subject: str
    scopes: frozenset[str]
    user_id: int | None

    @property
    def is_admin(self) -> bool:
        return "admin" in self.scopes

    @staticmethod
    def of(info: dict) -> "Principal":
        """The principal of the claims a security check accepted (`token_info`)."""
        return Principal(
            subject=info["sub"], scopes=frozenset(info["scope"].split()), user_id=info["user_id"]
        )


def current_principal() -> Principal:
    """The request's caller, built once and kept in its scope's `state` for the rest of it."""
    state = connexion.context.scope["state"]
    principal = state.get("principal")
    if principal is None:
        principal = state["principal"] = Principal.of(connexion.context.context["token_info"])
    return principal


REVOKED = (
    "The token has been revoked: its user was deleted, or changed password, email or role, "
    "since it was issued."
)
LOGIN_ENDED = (
    "The token has been revoked: a refresh token of its login was used twice, so every token "
    "of that login was revoked."
)


def token_info(token: str, request) -> dict:
    """x-tokenInfoFunc: the claims of a valid bearer token (401 otherwise, revoked included).
    Answers a coroutine, which Connexion awaits, when revocations must be read first."""
    keys = _keys_of[request.scope["app"]]
    try:
        claims = keys.tokens.verify(token)
    except InvalidToken as error:
        raise OAuthProblem(detail=str(error)) from None
    subject = claims["sub"]
    # Ours are checked for their exact form when verified (user_id_of cannot fail here).
    user_id = user_id_of(subject) if claims["iss"] == keys.tokens.issuer else None
    info = {
        "sub": subject,
        "scope": claims.get("scope", ""),
        "user_id": user_id,
        EXPIRES_AT: claims["exp"],
    }
    if user_id is None:
        return info  # a client's, or another issuer's: no user of ours revokes it
    info[_CREDENTIALS_VERSION] = claims.get(CREDENTIALS_VERSION, 0)
    info[_LOGIN] = claims.get(LOGIN)
    return _unless_revoked(keys.revocations, info)


def _unless_revoked(revocations: Revocations, info: dict):
    if not revocations.is_current():
        return _unless_revoked_after_refresh(revocations, info)
    _refuse_if_revoked(revocations, info)
    return info


async def _unless_revoked_after_refresh(revocations: Revocations, info: dict) -> dict:
    await off_loop.run(revocations.refresh)
    _refuse_if_revoked(revocations, info)
    return info


def _refuse_if_revoked(revocations: Revocations, info: dict) -> None:
    user_id, version, login = revocable(info)
    if revocations.refuses(user_id, version):
        raise OAuthProblem(detail=REVOKED)
    if login is not None and revocations.ended(login):
        raise OAuthProblem(detail=LOGIN_ENDED)


# In the claims a check accepted: the credentials version of the user they act for, and the
# login (refresh token family) a token of ours was issued to, or the API key's revocation family.
_CREDENTIALS_VERSION = "credentials_version"
_LOGIN = "login"
# And when the credentials stop being valid (a POSIX time; None: never), which ends a stream
# they hold open: a token's `exp`, an API key's `expires_at`.
EXPIRES_AT = "expires_at"


def revocable(info: dict) -> tuple[int, int, str | None] | None:
    """The user, their credentials version and the login (or API key) whose revocation
    (models/revocation.py) ends what the credentials of the claims `info` were accepted for;
    None for an OAuth client's or another issuer's token. A request is checked once; an open
    event stream goes on checking (Revocations.ends)."""
    if _CREDENTIALS_VERSION not in info:
        return None
    return info["user_id"], info[_CREDENTIALS_VERSION], info.get(_LOGIN)


async def api_key_info(api_key: str, required_scopes: list[str] | None) -> dict:
    """x-apikeyInfoFunc: the owner and scopes of a usable API key (401 otherwise, 403 when the
    key lacks a scope the operation requires)."""
    found = await off_loop.run(_find_api_key, api_key)
    if found is None:
        raise OAuthProblem(detail="The API key is not valid.")
    key, owner_role, owner_version = found
    if not key.usable:
        raise OAuthProblem(detail="The API key has been revoked or has expired.")
    # A key never exceeds its owner's current role, even if the owner was demoted since.
    scopes = set(key.scopes.split()) & ROLE_SCOPES.get(owner_role, frozenset())
    if not set(required_scopes or ()) <= scopes:
        raise OAuthScopeProblem(token_scopes=sorted(scopes), required_scopes=required_scopes)
    return {
        "sub": f"api-key:{key.id}",
        "scope": " ".join(sorted(scopes)),
        "user_id": key.owner_id,
        # The owner's version as the key was checked: a change of the owner's since (a new
        # role, a deletion) ends a stream the key holds open; so does the key's revocation.
        _CREDENTIALS_VERSION: owner_version,
        _LOGIN: api_key_family(key.id),
        EXPIRES_AT: key.expires_at.timestamp() if key.expires_at is not None else None,
    }


def metrics_token_info(token: str, request) -> dict | None:
    """x-bearerInfoFunc of the metrics scrape: the configured METRICS_TOKEN (401 otherwise)."""
    expected = _keys_of[request.scope["app"]].metrics_token
    if expected is None or not hmac.compare_digest(token.encode(), expected.encode()):
        return None
    return {"sub": "metrics-scraper", "scope": "", "user_id": None}


def _find_api_key(secret: str):
    with database.connection_context():
        return ApiKey.find(secret)


NO_CREDENTIALS = "This operation needs a bearer token (Authorization) or an API key (X-API-Key)."


# The request headers that carry credentials, lower-cased.
CREDENTIAL_HEADERS = ("authorization", "x-api-key")


def presented_credentials(request) -> bool:
    return any(name in request.headers for name in CREDENTIAL_HEADERS)


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def challenge(request, status: int, detail: str, required_scopes=None) -> str:
    """The RFC 6750 `WWW-Authenticate` value for a 401 or a 403 from the security checks."""
    parts = [f"Bearer realm={_quoted(REALM)}"]
    if status == 403:
        parts.append('error="insufficient_scope"')
        if required_scopes:
            parts.append(f"scope={_quoted(' '.join(sorted(required_scopes)))}")
    elif presented_credentials(request):
        parts.append('error="invalid_token"')
        parts.append(f"error_description={_quoted(detail)}")
    return ", ".join(parts)
