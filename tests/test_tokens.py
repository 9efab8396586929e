"""RS256 tokens and their JWKS, and tokens from trusted external authorisation servers."""

import base64
import contextlib
import hashlib
import hmac
import http.server
import json
import threading
import time

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jose import jwk, jwt
from support.helpers import JWT_SECRET, assert_problem, claims, create_user, segment

from app import create_app
from shopapi.settings import Settings

EXTERNAL = "https://idp.example.com"


def _key_pair() -> tuple[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return private, public


@pytest.fixture(scope="module")
def keys():
    return {"ours": _key_pair(), "idp": _key_pair(), "stranger": _key_pair()}


def _jwks_of(public: str, kid: str) -> dict:
    return {"keys": [{**jwk.construct(public, "RS256").to_dict(), "kid": kid, "alg": "RS256"}]}


@contextlib.contextmanager
def _serving(document: dict):
    """A JWKS over HTTP, as an authorisation server publishes it."""
    body = json.dumps(document).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
    finally:
        server.shutdown()


@pytest.fixture
def rs256(app, database_url, keys, tmp_path):
    """A client of an app that signs RS256 and trusts the IdP (whose JWKS is a file)."""
    jwks_file = tmp_path / "idp-jwks.json"
    jwks_file.write_text(json.dumps(_jwks_of(keys["idp"][1], "idp-1")))
    settings = Settings(
        database_url=database_url,
        validate_responses=True,
        jwt_private_key=keys["ours"][0],
        jwt_public_key=keys["ours"][1],
        oauth_trusted_issuers={EXTERNAL: str(jwks_file)},
    )
    return create_app(settings).test_client()


def _as(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def test_rs256_tokens_verify_with_the_published_jwks(rs256, keys):
    user = create_user(rs256_admin(rs256, keys), email="dora@example.com", password="dora-password")
    issued = rs256.post(
        "/v1/oauth/token",
        data={"grant_type": "password", "username": user["email"], "password": "dora-password"},
    ).json()["access_token"]
    assert jwt.get_unverified_header(issued)["alg"] == "RS256"

    published = rs256.get("/.well-known/jwks.json")
    assert published.status_code == 200
    (key,) = published.json()["keys"]
    assert key["kty"] == "RSA" and key["use"] == "sig" and key["alg"] == "RS256"
    assert jwt.get_unverified_header(issued)["kid"] == key["kid"]
    # Anyone can check our tokens with the published set alone.
    claims = jwt.decode(issued, published.json(), algorithms=["RS256"], audience="shopapi")
    assert claims["sub"] == str(user["id"])
    assert rs256.get(f"/v1/users/{user['id']}", headers=_as(issued)).status_code == 200


def rs256_admin(rs256, keys):
    """The RS256 client, carrying an admin token signed with our private key."""
    token = jwt.encode(claims(), keys["ours"][0], algorithm="RS256")
    rs256.headers.update(_as(token))
    return rs256


def test_an_hs256_token_keyed_with_the_public_key_is_401(rs256, keys):
    """The algorithm-confusion attack: HMAC with the RS256 public key as the secret."""
    public = keys["ours"][1]
    signed = f"{segment({'alg': 'HS256', 'typ': 'JWT'})}.{segment(claims())}"
    signature = hmac.new(public.encode(), signed.encode(), hashlib.sha256).digest()
    forged = f"{signed}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"
    response = rs256.get("/v1/products", headers=_as(forged))
    body = assert_problem(response, 401)
    assert "alg" in body["detail"]


def test_a_token_signed_by_another_key_is_401(rs256, keys):
    token = jwt.encode(claims(), keys["stranger"][0], algorithm="RS256")
    assert_problem(rs256.get("/v1/products", headers=_as(token)), 401)


def test_a_trusted_issuers_token_is_accepted_within_its_scopes(rs256, keys):
    token = jwt.encode(
        claims(iss=EXTERNAL, sub="warehouse-robot", scope="products:read"),
        keys["idp"][0],
        algorithm="RS256",
        headers={"kid": "idp-1"},
    )
    assert rs256.get("/v1/products", headers=_as(token)).status_code == 200
    assert_problem(rs256.get("/v1/orders", headers=_as(token)), 403)


@pytest.mark.parametrize(
    ("signer", "changes", "kid"),
    [
        ("stranger", {"iss": EXTERNAL}, "idp-1"),  # a trusted issuer's name, the wrong key
        ("idp", {"iss": EXTERNAL}, "unknown-kid"),
        ("idp", {"iss": "https://untrusted.example.com"}, "idp-1"),
        ("idp", {"iss": EXTERNAL, "aud": "another-api"}, "idp-1"),
        ("idp", {"iss": EXTERNAL, "exp": int(time.time()) - 3600}, "idp-1"),
    ],
)
def test_an_external_token_is_401_unless_everything_checks_out(rs256, keys, signer, changes, kid):
    token = jwt.encode(claims(**changes), keys[signer][0], algorithm="RS256", headers={"kid": kid})
    assert_problem(rs256.get("/v1/products", headers=_as(token)), 401)


def test_a_trusted_issuers_jwks_is_fetched_from_its_url(app, database_url, keys):
    with _serving(_jwks_of(keys["idp"][1], "idp-1")) as url:
        settings = Settings(
            database_url=database_url, jwt_secret=b"x" * 32, oauth_trusted_issuers={EXTERNAL: url}
        )
        client = create_app(settings).test_client()
        token = jwt.encode(
            claims(iss=EXTERNAL, sub="robot", scope="products:read"),
            keys["idp"][0],
            algorithm="RS256",
            headers={"kid": "idp-1"},
        )
        assert client.get("/v1/products", headers=_as(token)).status_code == 200


def test_hs256_publishes_no_key(client):
    response = client.get("/.well-known/jwks.json")
    assert response.status_code == 200
    assert response.json() == {"keys": []}


def test_the_first_admin_is_created_at_start_up_once(app, database_url):
    settings = Settings(
        database_url=database_url, admin_email="Root@Example.com", admin_password="root-password"
    )
    create_app(settings)
    client = create_app(settings).test_client()  # a second worker starting: no duplicate
    response = client.post(
        "/v1/oauth/token",
        data={
            "grant_type": "password",
            "username": "root@example.com",
            "password": "root-password",
        },
    )
    assert response.status_code == 200, response.text
    assert "admin" in response.json()["scope"].split()
    token = response.json()["access_token"]
    users = client.get("/v1/users", headers=_as(token)).json()
    assert [(u["email"], u["role"]) for u in users["data"]] == [("root@example.com", "admin")]


@pytest.mark.parametrize(
    "changes",
    [
        {"sub": "²"},  # a digit to str.isdigit, not to int()
        {"sub": "٣"},  # an Arabic-Indic three, which int() reads as 3
        {"sub": "02"},
        {"sub": "0"},
        {"sub": "3 "},
        {"sub": " 9"},  # int() reads it as 9: once a principal with no user, never revoked
        {"sub": "+9"},
        {"sub": "robot-7"},  # neither a user nor a client
        {"sub": "client:"},
        {"sub": "client:a b"},
        {"sub": str(2**63)},  # beyond the databases' integers
        {"sub": "1" * 4500},  # beyond what int() reads
        {"sub": "1", "cred_ver": "x"},
        {"sub": "1", "cred_ver": 1.5},
        {"sub": "1", "cred_ver": True},
        {"sub": "1", "cred_ver": -1},
        {"sub": "1", "sid": 7},
        {"sub": "1", "sid": ["a"]},
    ],
    ids=repr,
)
def test_a_token_of_ours_with_a_user_claim_not_in_its_exact_form_is_401(anonymous, changes):
    """With the signing key a token can say anything; what it says about a user is read
    strictly: `sub` a canonical decimal id, `cred_ver` a JSON integer, `sid` a login's id."""
    token = jwt.encode(claims(**changes), JWT_SECRET, algorithm="HS256")
    response = anonymous.get("/v1/products", headers=_as(token))
    body = assert_problem(response, 401)
    assert response.headers["www-authenticate"].startswith('Bearer realm="shopapi"')
    assert any(name in body["detail"] for name in changes)


@pytest.mark.parametrize(
    "subject", ["1", "42", str(2**63 - 1), "client:erp", "client:shc_" + "a-_Z9" * 8 + "abc"]
)
def test_a_canonical_user_id_or_a_client_is_a_subject_of_ours(anonymous, subject):
    token = jwt.encode(claims(sub=subject, cred_ver=0), JWT_SECRET, algorithm="HS256")
    assert anonymous.get("/v1/products", headers=_as(token)).status_code == 200


@pytest.mark.parametrize(
    "times",
    [
        {"exp": 1e308},
        {"exp": 901},  # a second longer than ACCESS_TOKEN_TTL (900)
        {"iat": 3600, "exp": 3900},  # issued in an hour
        {"iat": -(10**9), "exp": 300},
    ],
    ids=repr,
)
def test_a_token_of_ours_with_times_we_never_issue_is_401(anonymous, times):
    """`exp` at most ACCESS_TOKEN_TTL after `iat`, and `iat` not in the future: a token
    of ours that lasts for ever is one nobody can revoke. Times relative to now."""
    now = int(time.time())
    changes = {name: value if value == 1e308 else now + value for name, value in times.items()}
    token = jwt.encode(claims(**changes), JWT_SECRET, algorithm="HS256")
    response = anonymous.get("/v1/products", headers=_as(token))
    body = assert_problem(response, 401)
    assert "iat" in body["detail"] or "exp" in body["detail"]


def test_a_token_of_ours_lasting_exactly_its_lifetime_is_accepted(anonymous):
    now = int(time.time())
    token = jwt.encode(claims(iat=now, exp=now + 900), JWT_SECRET, algorithm="HS256")
    assert anonymous.get("/v1/products", headers=_as(token)).status_code == 200


def test_with_rs256_a_refresh_within_the_grace_gets_the_same_pair_too(rs256, keys):
    """RS256 (PKCS #1 v1.5) signs the same claims to the same bytes, as HS256 does."""
    create_user(rs256_admin(rs256, keys), email="erin@example.com", password="erin-password")
    login = rs256.post(
        "/v1/oauth/token",
        data={
            "grant_type": "password",
            "username": "erin@example.com",
            "password": "erin-password",
        },
    ).json()
    refresh = {"grant_type": "refresh_token", "refresh_token": login["refresh_token"]}
    first, again = (rs256.post("/v1/oauth/token", data=refresh) for _ in range(2))
    assert first.status_code == again.status_code == 200, again.text
    assert again.json() == first.json()
    assert jwt.get_unverified_header(first.json()["access_token"])["alg"] == "RS256"
