"""Requests the tests make often, through the API itself, and the credentials they use."""

import base64
import contextlib
import itertools
import json
import time

import psycopg2
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from models.user import ROLE_SCOPES, SCOPES
from shopapi.auth.tokens import AccessTokens
from shopapi.settings import Settings

_serial = itertools.count(1)

# The signing secret of every app and live server the tests start, so that a token minted here
# is good for all of them.
JWT_SECRET = "tests-only-secret-0123456789abcdef"
# The suite sends many requests from one client: limits this many times the spec's keep out of
# its way (test_traffic.py tests the limits themselves).
RATE_LIMIT_SCALE = 1000
TOKENS = AccessTokens(Settings(jwt_secret=JWT_SECRET.encode()))
# The tests' apps publish a Web Push key (GET /v1/push/vapid-public-key): a P-256 key of this run.
VAPID = {
    "vapid_private_key": ec.generate_private_key(ec.SECP256R1())
    .private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    .decode(),
    "vapid_subject": "mailto:tests@example.com",
}


def claims(**changes) -> dict:
    """The claims of a valid admin token of ours; a change to None leaves that claim out."""
    now = int(time.time())
    valid = {
        "iss": "shopapi",
        "aud": "shopapi",
        "sub": "client:tests",
        "iat": now,
        "exp": now + 300,
        "scope": " ".join(SCOPES),
    }
    return {k: v for k, v in {**valid, **changes}.items() if v is not None}


def segment(value) -> str:
    """A JWT segment: base64url JSON without padding, for tokens jose would refuse to make."""
    encoded = base64.urlsafe_b64encode(json.dumps(value, separators=(",", ":")).encode())
    return encoded.rstrip(b"=").decode()


def bearer(subject: str = "client:tests", scopes=SCOPES) -> dict:
    """Headers carrying a valid access token; by default an admin OAuth client's."""
    return {"Authorization": f"Bearer {TOKENS.issue(subject, scopes)}"}


def bearer_for(user: dict) -> dict:
    """Headers carrying a token for `user` (a user as the API returned it), with its role's
    scopes, as the password grant would issue it."""
    return bearer(str(user["id"]), ROLE_SCOPES[user["role"]])


def create_user(client, **fields):
    n = next(_serial)
    body = {"email": f"user{n}@example.com", "name": f"User {n}", "password": "correct horse"}
    response = client.post("/v1/users", json={**body, **fields})
    assert response.status_code == 201, response.text
    return response.json()


def create_product(client, **fields):
    n = next(_serial)
    body = {"sku": f"SKU-{n:05d}", "name": f"Product {n}", "price_cents": 1000, "stock": 10}
    response = client.post("/v1/products", json={**body, **fields})
    assert response.status_code == 201, response.text
    return response.json()


def place_order(client, user, *lines, note=None):
    """`lines` are (product, quantity) pairs."""
    body = {
        "user_id": user["id"],
        "items": [{"product_id": p["id"], "quantity": q} for p, q in lines],
    }
    if note is not None:
        body["note"] = note
    return client.post("/v1/orders", json=body)


def assert_problem(response, status: int):
    """The response is an RFC 9457 problem of `status`, carrying the request id."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status
    assert body["type"] == "about:blank"
    assert body["title"] and body["detail"]
    assert body["request_id"] == response.headers["x-request-id"]
    assert "Traceback" not in response.text
    return body


# A test whose subject is not what the database does (how a browser handles the docs UI, a
# quota that servers share in Redis, what a forwarded header means) runs once, on the embedded
# default: its PostgreSQL half would repeat it. The API calls it makes on the way are tested on
# both databases by the tests whose subject they are.
ONE_DATABASE = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


# The settings of a server whose requests a test holds on a lock for as long as it needs: by
# default a lock wait ends within DATABASE_LOCK_TIMEOUT_SECONDS, and its request is a 503
# (tests/test_database_timeouts.py). PgBouncer's query_timeout (ops/pgbouncer.ini) still holds.
WAITS_UNBOUNDED = {"DATABASE_LOCK_TIMEOUT_SECONDS": "0", "DATABASE_STATEMENT_TIMEOUT_SECONDS": "0"}


# How long a wait may take before it is a failure: generous, because a worker that has just
# started still imports everything, for many seconds on a busy machine; it is waited for, not
# slept through, so a healthy run takes what the work takes.
WAIT_SECONDS = 120


def wait_for(condition, what: str):
    """Poll `condition` until it returns something true; return it."""
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {WAIT_SECONDS} s for {what}")
        time.sleep(0.02)


def scalar(database_url: str, sql: str):
    """The one value `sql` answers, asked on a connection of its own straight to PostgreSQL."""
    with contextlib.closing(psycopg2.connect(database_url)) as connection:
        cursor = connection.cursor()
        cursor.execute(sql)
        return cursor.fetchone()[0]


@contextlib.contextmanager
def locked(database_url: str, statement: str, params=()):
    """What `statement` locks (`LOCK TABLE ...`, `SELECT ... FOR UPDATE`) held, on a connection
    of its own, until the block ends: the requests that need it wait meanwhile."""
    connection = psycopg2.connect(database_url)
    try:
        connection.cursor().execute(statement, params)
        yield
    finally:
        connection.rollback()
        connection.close()
