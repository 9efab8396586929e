"""Access tokens: the JWTs this service signs, and those of trusted external authorisation
servers, every check explicit (the algorithm pinned per issuer, the times required): see
docs/auth.md."""

import base64
import hashlib
import hmac
import json
import math
import pathlib
import re
import sys
import threading
import time
import urllib.request
from collections.abc import Iterable, Mapping

from jose import jwk, jwt
from jose.exceptions import ExpiredSignatureError, JOSEError

from shopapi.settings import Settings

# External servers sign with asymmetric keys; a shared secret there would be a shared password.
_EXTERNAL_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "ES512")
# Seconds of clock skew between hosts: a token is accepted this long past its `exp`.
EXPIRY_LEEWAY = 30
_REQUIRED = {
    "require_exp": True,
    "require_iat": True,
    "require_iss": True,
    "require_aud": True,
    "require_sub": True,
    "leeway": EXPIRY_LEEWAY,
}
# The private claim of a token issued to a user: the user's credentials version when it was
# issued (models/revocation.py). A token without it (issued before there were versions) is of
# version 0.
CREDENTIALS_VERSION = "cred_ver"
# The claim naming the login a user's token was issued to (its refresh tokens' family), so that
# ending the login revokes it: OpenID Connect's session id claim, registered in IANA's JWT claims.
LOGIN = "sid"
_LOGIN_ID = re.compile(r"[0-9a-f]{32}")
# The ids of our users as the `sub` of our tokens: canonical decimal (ASCII digits, no sign, no
# leading zero) up to the databases' largest integer, as str(user.id) writes them.
_USER_ID = re.compile(r"[1-9][0-9]{0,18}")
_LARGEST_ID = 2**63 - 1
# The other subjects of our tokens: an OAuth client's, `client:` and its client id (URL-safe
# characters, at most 64: models/oauth_client.py).
_CLIENT = re.compile(r"client:[A-Za-z0-9_-]{1,64}")
# Tokens issued here whose signature has been checked, kept with their claims so that a client's
# next requests skip the check (an HMAC or RSA verification and two base64/JSON decodes each).
# At most this many, when full the expired ones first (the cache refuses them anyway), then the
# oldest tenth. Each is kept under a digest of the token, with the claim names and the values
# that all our tokens share (issuer, audience, scopes) interned: about 0.6 KB, where the token
# and its claims as decoded were 1.5 KB (tracemalloc), and a worker of the soak, seeing new
# clients of its 10,000 for half an hour, grew by them all along.
VERIFIED_CACHE_SIZE = 10_000
_SHARED_CLAIMS = frozenset({"iss", "aud", "scope"})
# How long a fetched JWKS is trusted, and how soon an unknown `kid` may trigger a refetch.
_JWKS_MAX_AGE = 600
_JWKS_REFETCH_AFTER = 60


# The claims that are times: NumericDate, a JSON number of seconds (RFC 7519 2).
_TIMES = ("exp", "iat", "nbf")


def _digest(token: str) -> bytes:
    # 128 bits: another string with a remembered token's digest is a second preimage, out of
    # reach. A string made to collide with a token of ours gets only that token's claims,
    # which whoever made it holds already.
    return hashlib.blake2b(token.encode(), digest_size=16).digest()


def _is_numeric_date(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class InvalidToken(Exception):
    """The token cannot be trusted; the message says why, for the client (never the token)."""


def user_id_of(subject: str) -> int | None:
    """The user a `sub` of ours names, None for a client's (`client:<client id>`); anything
    else is InvalidToken. `int()` would read `"02"`, `" 9"`, `"+9"` and `"٣"` as users; a
    subject that is neither form would be a principal with no user, and nothing to revoke."""
    if _USER_ID.fullmatch(subject) and int(subject) <= _LARGEST_ID:
        return int(subject)
    if _CLIENT.fullmatch(subject):
        return None
    raise InvalidToken(
        "The token's sub claim is neither a user's id (a decimal integer) nor a client's."
    )


def _check_times(claims: Mapping) -> None:
    """The times are JSON numbers (InvalidToken): jose would take "1700000000" for one, and the
    cache of verified tokens then crash on it."""
    if not all(_is_numeric_date(claims[name]) for name in _TIMES if name in claims):
        raise InvalidToken("The token's exp, iat and nbf claims must be numbers.")


def _check_our_claims(claims: Mapping, ttl: int) -> None:
    """The claims of a token of ours are in their exact form (InvalidToken): its subject a user
    or a client, its user's claims exact, and its times those of a token we issue (issued
    before now, lasting at most `ttl`)."""
    user_id_of(claims["sub"])
    version = claims.get(CREDENTIALS_VERSION, 0)
    if type(version) is not int or not 0 <= version <= _LARGEST_ID:
        raise InvalidToken("The token's cred_ver claim must be a non-negative integer.")
    login = claims.get(LOGIN, "")
    if LOGIN in claims and not (isinstance(login, str) and _LOGIN_ID.fullmatch(login)):
        raise InvalidToken("The token's sid claim is not a login's id.")
    if claims["iat"] > time.time() + EXPIRY_LEEWAY:
        raise InvalidToken("The token's iat claim is in the future.")
    if claims["exp"] - claims["iat"] > ttl:
        raise InvalidToken(
            f"The token's exp claim is more than {ttl} seconds (ACCESS_TOKEN_TTL) after its iat."
        )


def _thumbprint(public_jwk: dict) -> str:
    """RFC 7638 JWK thumbprint: a stable key id derived from the key itself."""
    members = {name: public_jwk[name] for name in ("e", "kty", "n")}
    canonical = json.dumps(members, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(hashlib.sha256(canonical).digest()).rstrip(b"=").decode()


class _KeySet:
    """A trusted issuer's JSON Web Key Set, from a file or an https URL, cached."""

    def __init__(self, location: str):
        self._location = location
        self._keys: list[dict] = []
        self._fetched_at = float("-inf")
        self._lock = threading.Lock()

    def _load(self) -> list[dict]:
        if self._location.startswith(("https://", "http://")):
            with urllib.request.urlopen(self._location, timeout=3) as response:  # noqa: S310
                document = json.load(response)
        else:
            document = json.loads(pathlib.Path(self._location).read_text())
        return [key for key in document.get("keys", []) if isinstance(key, dict)]

    def key_for(self, kid: str | None) -> dict:
        with self._lock:
            age = time.monotonic() - self._fetched_at
            if age > _JWKS_MAX_AGE or (
                age > _JWKS_REFETCH_AFTER and not self._find(kid, self._keys)
            ):
                try:
                    self._keys = self._load()
                except (OSError, ValueError) as error:
                    if not self._keys:
                        raise InvalidToken("The issuer's signing keys are unavailable.") from error
                self._fetched_at = time.monotonic()
            key = self._find(kid, self._keys)
        if key is None:
            raise InvalidToken("The token is signed with an unknown key.")
        return key

    @staticmethod
    def _find(kid: str | None, keys: list[dict]) -> dict | None:
        if kid is None:
            return keys[0] if len(keys) == 1 else None
        return next((key for key in keys if key.get("kid") == kid), None)


class AccessTokens:
    """Issues this service's access tokens and verifies them and trusted issuers' tokens."""

    def __init__(self, settings: Settings):
        self.issuer = settings.jwt_issuer
        self.audience = settings.jwt_audience
        self.ttl = settings.access_token_ttl
        if settings.jwt_private_key:
            self.algorithm = "RS256"
            self._signing_key = settings.jwt_private_key
            verifying_key = settings.jwt_public_key
            public = jwk.construct(verifying_key, "RS256").to_dict()
            self._kid = _thumbprint(public)
            self._published = [{**public, "kid": self._kid, "use": "sig", "alg": "RS256"}]
        else:
            self.algorithm = "HS256"
            self._signing_key = verifying_key = settings.jwt_secret
            self._kid = None
            self._published = []  # a symmetric key is never published
        # Built once: given the key as text, jose tries it as a JSON key set (and fails) and
        # builds the key again for every token it checks, a third of a check (docs/auth.md).
        self._verifying_key = jwk.construct(verifying_key, self.algorithm)
        self._trusted = {
            issuer: _KeySet(location)
            for issuer, location in settings.oauth_trusted_issuers.items()
            if issuer != self.issuer
        }
        self._verified: dict[bytes, Mapping] = {}
        self._verified_lock = threading.Lock()

    def jwks(self) -> dict:
        return {"keys": self._published}

    def issue(
        self, subject: str, scopes: Iterable[str], issued_at: int | None = None, **claims
    ) -> str:
        """A signed token; one issued at the same `issued_at` with the same claims is the same
        token, byte for byte (HS256 and RS256 signatures are deterministic)."""
        now = int(time.time()) if issued_at is None else issued_at
        payload = {
            "iss": self.issuer,
            "aud": self.audience,
            "sub": subject,
            "iat": now,
            "exp": now + self.ttl,
            "scope": " ".join(sorted(scopes)),
            **claims,
        }
        headers = {"kid": self._kid} if self._kid else None
        return jwt.encode(payload, self._signing_key, algorithm=self.algorithm, headers=headers)

    def verify(self, token: str) -> Mapping:
        """The token's claims, or InvalidToken.

        A token issued here is checked once: its claims are kept until it expires. The signing
        key cannot change while the process runs, and nothing else about the token can. Other
        issuers' tokens are checked every time, so that a key they withdraw stops working."""
        digest = _digest(token)
        claims = self._verified.get(digest)
        if claims is None:
            claims = self._verify(token)
            if claims["iss"] == self.issuer:
                self._remember(digest, claims)
        elif claims["exp"] + EXPIRY_LEEWAY < time.time():
            raise InvalidToken("The token has expired.")
        return claims

    @property
    def remembered(self) -> int:
        """How many verified tokens are kept with their claims."""
        return len(self._verified)

    def _remember(self, digest: bytes, claims: Mapping) -> None:
        kept = {
            sys.intern(name): (
                sys.intern(value) if name in _SHARED_CLAIMS and isinstance(value, str) else value
            )
            for name, value in claims.items()
        }
        with self._verified_lock:
            if len(self._verified) >= VERIFIED_CACHE_SIZE:
                self._make_room()
            self._verified[digest] = kept

    def _make_room(self) -> None:
        """Drop the expired tokens, and the oldest tenth if that freed less. Readers are not
        locked out: the dict they read is replaced, not changed."""
        cutoff = time.time() - EXPIRY_LEEWAY
        kept = [
            (digest, claims) for digest, claims in self._verified.items() if claims["exp"] >= cutoff
        ]
        self._verified = dict(kept[max(0, len(kept) - VERIFIED_CACHE_SIZE * 9 // 10) :])

    def _verify(self, token: str) -> Mapping:
        # Most tokens are ours: checked as ours first, jose reading the token twice, where
        # finding its issuer first made it three times. Any other token, or one of ours that
        # fails, takes the way that finds its issuer and says what is wrong.
        try:
            claims = self._decode(token, self._verifying_key, [self.algorithm], self.issuer)
        except (JOSEError, ArithmeticError, ValueError, TypeError):
            return self._verify_any(token)
        return self._checked(claims, ours=True)

    def _verify_any(self, token: str) -> Mapping:
        try:
            unverified = jwt.get_unverified_claims(token)
        except JOSEError:
            raise InvalidToken("The token is not a well-formed JWT.") from None
        # Before jose reads them: it would fail on Infinity or a list with errors of its own.
        _check_times(unverified)
        issuer = unverified.get("iss")
        if issuer == self.issuer:
            key, algorithms = self._verifying_key, [self.algorithm]
        elif isinstance(issuer, str) and issuer in self._trusted:
            header = jwt.get_unverified_header(token)
            key = self._trusted[issuer].key_for(header.get("kid"))
            algorithm = key.get("alg") or header.get("alg")
            if algorithm not in _EXTERNAL_ALGORITHMS:
                raise InvalidToken("The token's algorithm is not accepted.")
            algorithms = [algorithm]
        else:
            raise InvalidToken("The token's issuer is not trusted.")
        try:
            claims = self._decode(token, key, algorithms, issuer)
        except ExpiredSignatureError:
            raise InvalidToken("The token has expired.") from None
        except JOSEError as error:
            raise InvalidToken(f"The token is not valid: {str(error).rstrip('.')}.") from None
        return self._checked(claims, ours=issuer == self.issuer)

    def _decode(self, token: str, key, algorithms: list[str], issuer: str) -> Mapping:
        return jwt.decode(
            token,
            key,
            algorithms=algorithms,
            audience=self.audience,
            issuer=issuer,
            options=_REQUIRED,
        )

    def _checked(self, claims: Mapping, ours: bool) -> Mapping:
        """The claims jose accepted, held to what jose does not check (InvalidToken)."""
        _check_times(claims)
        if not isinstance(claims.get("sub"), str) or not isinstance(claims.get("scope", ""), str):
            raise InvalidToken("The token's sub and scope claims must be strings.")
        if ours:
            _check_our_claims(claims, self.ttl)
        return claims

    def derived_key(self, purpose: str) -> bytes:
        """A key for `purpose`, derived from the signing key (HMAC-SHA256 as a PRF, one key per
        purpose): every process that signs our tokens has it, and nothing more is configured."""
        key = self._signing_key
        key = key.encode() if isinstance(key, str) else key
        return hmac.new(key, f"shopapi {purpose}".encode(), hashlib.sha256).digest()
