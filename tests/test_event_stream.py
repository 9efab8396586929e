"""GET /events/stream: Server-Sent Events from a live uvicorn server, read as they arrive. What
each client sees, resuming with Last-Event-ID, the per-client limit, the heartbeat, that idle
streams hold no database connection, and what ends a stream: its lifetime, a client that reads
nothing, revoked credentials (tests/test_draining.py: the server stopping)."""

import asyncio
import contextlib
import json
import time

import httpx
import pytest
from support.event_stream import messages_of, stream, unread_stream
from support.helpers import (
    TOKENS,
    WAIT_SECONDS,
    assert_problem,
    bearer,
    bearer_for,
    create_product,
    create_user,
    locked,
    place_order,
    scalar,
    wait_for,
)
from support.live import live_server

pytestmark = pytest.mark.slow

PER_CLIENT = 2
IDLE_STREAMS = 100
# A client that accepts nothing for this long is cut off; the tests' clients read at once.
SEND_TIMEOUT_SECONDS = 2
SERVER = {
    "EVENT_STREAM_MAX_PER_CLIENT": str(PER_CLIENT),
    "EVENT_STREAM_HEARTBEAT_SECONDS": "1",
    "SEND_TIMEOUT_SECONDS": str(SEND_TIMEOUT_SECONDS),
    "VALIDATE_RESPONSES": "1",
    "CORS_ORIGINS": "https://shop.example",
}


@pytest.fixture(scope="module")
def base(database_url, direct_database_url):
    """One server for the module. On PostgreSQL it connects straight to the server, not through
    the suite's PgBouncer: the test of idle streams counts the server's own connections."""
    with live_server(direct_database_url, **SERVER) as base:
        yield base


@pytest.fixture(scope="module")
def elsewhere(direct_database_url):
    """Another server process on the same database: what is changed there, `base` learns only
    from the database."""
    with live_server(direct_database_url, **SERVER) as elsewhere:
        yield elsewhere


@pytest.fixture
def admin(base):
    with httpx.Client(base_url=base, headers=bearer(), timeout=WAIT_SECONDS) as client:
        yield client


def _login(base: str, user: dict) -> dict:
    """Headers with the access token the password grant gives `user`."""
    grant = {"grant_type": "password", "username": user["email"], "password": "correct horse"}
    response = httpx.post(f"{base}/v1/oauth/token", data=grant, timeout=WAIT_SECONDS)
    assert response.status_code == 200, response.text
    return {"Authorization": f"Bearer {response.json()['access_token']}"}


# An event of about 5 KB: a few dozen fill what the server and a client that reads nothing buffer.
LARGE = "x" * 5000


def _feed_ids(admin, after: int) -> list[int]:
    page = admin.get("/v1/events", params={"id[gt]": after, "per_page": 100}).json()
    return [event["id"] for event in page["data"]]


def test_a_change_reaches_an_open_stream_at_once_as_the_feed_shows_it(base, admin):
    customer = create_user(admin)
    product = create_product(admin, stock=50)
    with stream(base, bearer()) as events:
        assert events.opening["retry"] == "3000"
        start = int(events.opening["id"])
        # Nothing happens: the heartbeat (every second here) keeps the connection open.
        assert events.next_message() == {"comment": "keep-alive"}
        placed = place_order(admin, customer, (product, 1))
        answered = time.monotonic()
        assert placed.status_code == 201, placed.text
        (created,) = events.events(1)
        latency = time.monotonic() - answered
    assert created["event"] == "order.created"
    assert int(created["id"]) > start
    assert created["data"] == admin.get(f"/v1/events/{created['id']}").json()
    assert created["data"]["data"]["id"] == placed.json()["id"]
    print(f"order.created reached the stream {latency * 1000:.0f} ms after the answer")


def test_a_resumed_stream_misses_and_repeats_nothing(base, admin):
    product = create_product(admin, stock=50)
    # Each connection another admin client's: a stream just closed counts against its client's
    # limit until the server has seen the connection go.
    with stream(base, bearer("client:first")) as first:
        started_after = int(first.opening["id"])
        create_user(admin)
        create_user(admin)
        received = [int(event["id"]) for event in first.events(2)]
    # While disconnected: more changes, then resume after the last event received.
    create_user(admin)
    admin.patch(f"/v1/products/{product['id']}", json={"stock": 40}).raise_for_status()
    create_user(admin)
    with stream(base, {**bearer("client:second"), "Last-Event-ID": str(received[-1])}) as resumed:
        assert resumed.opening["id"] == str(received[-1])
        missed = [int(event["id"]) for event in resumed.events(3)]
        create_user(admin)
        live = [int(event["id"]) for event in resumed.events(1)]
        assert resumed.nothing_more()
    assert received + missed + live == _feed_ids(admin, started_after)
    # A stream that sent no event yet resumes from the position it opened with.
    with stream(base, bearer("client:third")) as quiet:
        position = quiet.opening["id"]
    create_user(admin)
    with stream(base, {**bearer("client:fourth"), "Last-Event-ID": position}) as resumed:
        (event,) = resumed.events(1)
        assert event["event"] == "user.created" and int(event["id"]) > int(position)


def test_each_client_sees_only_what_it_may_read(base, admin):
    carol, dave = create_user(admin), create_user(admin)
    product = create_product(admin, stock=50)
    with (
        stream(base, bearer_for(carol)) as carols,
        stream(base, bearer()) as admins,
        stream(base, bearer("client:v2-reader"), "/v2/events/stream") as v2,
    ):
        place_order(admin, dave, (product, 1)).raise_for_status()
        place_order(admin, carol, (product, 1)).raise_for_status()
        admin.patch(f"/v1/products/{product['id']}", json={"name": "Renamed"}).raise_for_status()
        seen_by_admin = admins.events(3)
        seen_by_carol = carols.events(2)
        seen_in_v2 = v2.events(3)
        assert carols.nothing_more()
    owners = [event["data"]["data"].get("user_id") for event in seen_by_admin]
    assert owners == [dave["id"], carol["id"], None]
    # Carol: her own order and the catalogue, not Dave's order, and not who acted.
    assert [e["id"] for e in seen_by_carol] == [e["id"] for e in seen_by_admin[1:]]
    assert {e["data"]["actor_subject"] for e in seen_by_carol} == {""}
    assert seen_by_admin[0]["data"]["actor_subject"] == "client:tests"
    # Version 2's representation: money as an amount and a currency.
    assert seen_in_v2[2]["data"]["data"]["price"] == {"amount": "10.00", "currency": "EUR"}
    # Credentials that read no kind of event have nothing to stream.
    with stream(base, bearer("client:writer", ["orders:write"])) as refused:
        refused.response.read()
        assert_problem(refused.response, 403)


def test_a_partners_api_key_streams_what_its_scopes_read(base, admin):
    """The stream's row of test_security's table (each operation succeeds with exactly its
    declared scopes, by either scheme), here because a stream does not end for a test client
    that reads a whole response."""
    partner = create_user(admin, role="partner")
    issued = admin.post(
        "/v1/api-keys",
        json={"name": "stream", "scopes": ["products:read"], "owner_id": partner["id"]},
    )
    assert issued.status_code == 201, issued.text
    with stream(base, {"X-API-Key": issued.json()["key"]}) as partners:
        product = create_product(admin, stock=5)
        [event] = partners.events(1)
    assert (event["event"], event["data"]["resource_id"]) == ("product.created", product["id"])


def test_a_client_over_its_limit_of_streams_gets_429(base, admin):
    headers = bearer("client:greedy", ["products:read"])
    with contextlib.ExitStack() as open_streams:
        held = [open_streams.enter_context(stream(base, headers)) for _ in range(PER_CLIENT)]
        with stream(base, headers) as refused:
            refused.response.read()
            body = assert_problem(refused.response, 429)
            assert int(refused.response.headers["Retry-After"]) > 0
            assert f"{PER_CLIENT} event streams" in body["detail"]
        with stream(base, bearer("client:another", ["products:read"])) as other:
            assert other.response.status_code == 200  # the limit is per client
        held[0].close()

        def one_more_opens():
            with stream(base, headers) as again:
                return again.response.status_code == 200

        wait_for(one_more_opens, "a stream to open once one of the client's has closed")


def _connections(direct_database_url: str) -> int:
    return scalar(
        direct_database_url,
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )


async def _open_idle_streams(base: str, count: int, measure) -> int:
    """`measure()` while `count` streams (each its own client's) are open and idle, past a
    heartbeat each."""
    limits = httpx.Limits(max_connections=count)
    async with (
        httpx.AsyncClient(base_url=base, limits=limits, timeout=WAIT_SECONDS) as client,
        contextlib.AsyncExitStack() as streams,
    ):

        async def open_one(n: int):
            headers = bearer(f"client:idle-{n}", ["products:read"])
            response = await streams.enter_async_context(
                client.stream("GET", "/v1/events/stream", headers=headers)
            )
            assert response.status_code == 200
            return response.aiter_lines()

        async def until_idle(stream_lines):  # open, then nothing but a heartbeat
            while await anext(stream_lines) != ": keep-alive":
                pass

        lines = await asyncio.gather(*(open_one(n) for n in range(count)))
        await asyncio.gather(*(until_idle(stream_lines) for stream_lines in lines))
        return await asyncio.to_thread(measure)


def test_idle_streams_hold_no_database_connection(base, admin, database_url, direct_database_url):
    if not database_url.startswith("postgresql"):
        pytest.skip("counted in PostgreSQL's pg_stat_activity")
    create_user(admin)  # the server has connected, as it has after any request
    none_open = _connections(direct_database_url)
    measured = asyncio.run(
        _open_idle_streams(base, IDLE_STREAMS, lambda: _connections(direct_database_url))
    )
    print(f"connections: {none_open} with no stream open, {measured} with {IDLE_STREAMS}")
    # The one poller's read borrows a pooled connection for milliseconds; the streams hold none.
    assert measured <= none_open + 1


def test_a_web_app_on_an_allowed_origin_may_open_and_read_a_stream(base, admin):
    """A browser's fetch of the stream, with a bearer token from another origin: its preflight
    is answered, and the stream itself carries the CORS headers that let the script read it."""
    origin = {"Origin": "https://shop.example"}
    preflight = httpx.options(
        f"{base}/v1/events/stream",
        headers={
            **origin,
            "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "authorization, last-event-id",
        },
    )
    assert preflight.status_code == 200, preflight.text
    assert preflight.headers["access-control-allow-origin"] == "https://shop.example"
    allowed = preflight.headers["access-control-allow-headers"].lower()
    assert "authorization" in allowed and "last-event-id" in allowed
    with stream(base, {**bearer(), **origin}) as events:
        assert events.response.headers["access-control-allow-origin"] == "https://shop.example"
        assert "Origin" in events.response.headers["vary"]
        created = create_product(admin)
        [event] = events.events(1)
        assert event["data"]["resource_id"] == created["id"]


def test_a_write_made_while_the_poller_starts_reaches_the_first_stream(
    database_url, direct_database_url
):
    """A process's first stream starts its poller, whose first reads (the revocations, then the
    newest event) may come after the stream's starting point is read: a write in between is the
    stream's all the same, caught up to where the poller starts from."""
    if not database_url.startswith("postgresql"):
        pytest.skip("the poller's first read is held by a lock on one PostgreSQL table")
    poller_waits = (
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND wait_event_type = 'Lock' AND query LIKE '%revocation%'"
    )
    # A process of its own: no stream has started its poller, no request read its revocations
    # (a client's token has none to check), so the poller's first poll reads them.
    with (
        live_server(direct_database_url, **SERVER) as base,
        httpx.Client(base_url=base, headers=bearer(), timeout=WAIT_SECONDS) as admin,
        contextlib.ExitStack() as held,
    ):
        held.enter_context(
            locked(direct_database_url, "LOCK TABLE revocation IN ACCESS EXCLUSIVE MODE")
        )
        with stream(base, bearer("client:first-stream", ["products:read"])) as events:
            wait_for(
                lambda: scalar(direct_database_url, poller_waits),
                "the poller's first read to wait for the revocations",
            )
            created = create_product(admin)
            held.close()  # the poller reads on, from after the write
            [event] = events.events(1)
    assert event["data"]["resource_id"] == created["id"]
    assert int(event["id"]) > int(events.opening["id"])


# --- what ends a stream -----------------------------------------------------------------------


def test_a_client_that_reads_nothing_is_cut_off(base, admin):
    """A write the client does not take (its buffers and the server's full) waits at most
    SEND_TIMEOUT_SECONDS: then the server resets the connection, and the stream is over."""
    with unread_stream(base, bearer("client:deaf", ["products:read"])) as deaf:

        def cut_off_after_one_more_event():
            create_product(admin, description=LARGE)
            return deaf.cut_off()

        wait_for(cut_off_after_one_more_event, "the server to cut off a client that reads nothing")
        status, body, ended_cleanly = deaf.read_to_end()
    assert status == 200 and not ended_cleanly
    ids = [int(message["id"]) for message in messages_of(body) if "data" in message]
    assert ids == sorted(ids)  # what had been buffered, in order: resumed with Last-Event-ID


def test_a_streams_lifetime_runs_from_its_opening_through_catching_up(
    database_url, direct_database_url
):
    """EVENT_STREAM_MAX_SECONDS counts from the opening, catching up included, and ends a write
    that waits for the client too."""
    server = {
        **SERVER,
        "EVENT_STREAM_MAX_SECONDS": "2",
        "EVENT_STREAM_MAX_PER_CLIENT": "1",
        "SEND_TIMEOUT_SECONDS": "3600",  # only the lifetime can end the stream here
    }
    headers = bearer("client:resuming", ["products:read"])
    with (
        live_server(direct_database_url, **server) as base,
        httpx.Client(base_url=base, headers=bearer(), timeout=WAIT_SECONDS) as admin,
    ):
        with stream(base, bearer("client:position", ["products:read"])) as before:
            position = before.opening["id"]
        created = [create_product(admin, description=LARGE)["id"] for _ in range(100)]
        with unread_stream(base, {**headers, "Last-Event-ID": position}) as resuming:

            def another_stream_opens():  # the client's one stream has ended
                with stream(base, headers) as again:
                    return again.response.status_code == 200

            wait_for(another_stream_opens, "the resuming stream to end while catching up")
            status, body, ended_cleanly = resuming.read_to_end()
    assert status == 200 and ended_cleanly
    messages = messages_of(body)
    assert messages[0] == {"retry": "3000", "id": position}
    resources = [json.loads(message["data"])["resource_id"] for message in messages[1:]]
    assert resources == created[: len(resources)]


@pytest.mark.parametrize(
    "change",
    [{"password": "a new password"}, {"email": "moved@example.com"}, {"role": "customer"}, None],
    ids=["password", "email", "role", "deletion"],
)
def test_a_users_stream_ends_when_their_credentials_are_revoked(base, elsewhere, admin, change):
    """The change is made through another server process: the stream's learns of it only from
    the revocations it reads (shopapi/auth/revocations.py), within seconds."""
    user = create_user(admin, role="admin")
    credentials = _login(base, user)
    with (
        stream(base, credentials) as events,
        httpx.Client(base_url=elsewhere, headers=bearer(), timeout=WAIT_SECONDS) as other,
    ):
        url = f"/v1/users/{user['id']}"
        changed = other.delete(url) if change is None else other.patch(url, json=change)
        assert changed.status_code in (200, 204), changed.text
        events.until_ended()
        assert events.ended_cleanly
    with stream(base, credentials) as again:
        again.response.read()
        assert "revoked" in assert_problem(again.response, 401)["detail"]


def test_a_demoted_admins_stream_ends_and_the_next_shows_what_the_new_role_sees(base, admin):
    user = create_user(admin, role="admin")
    with stream(base, _login(base, user)) as events:
        demoted = admin.patch(f"/v1/users/{user['id']}", json={"role": "customer"})
        assert demoted.status_code == 200, demoted.text
        events.until_ended()
    with stream(base, _login(base, user)) as events:
        create_user(admin)  # another user's: an admin's stream would show it first
        product = create_product(admin)
        [event] = events.events(1)
    assert (event["event"], event["data"]["resource_id"]) == ("product.created", product["id"])
    assert event["data"]["actor_subject"] == ""


def test_an_api_keys_stream_ends_when_its_owner_is_demoted(base, admin):
    owner = create_user(admin, role="admin")
    issued = admin.post(
        "/v1/api-keys",
        json={"name": "feed", "scopes": ["orders:read", "admin"], "owner_id": owner["id"]},
    )
    assert issued.status_code == 201, issued.text
    key = {"X-API-Key": issued.json()["key"]}
    with stream(base, key) as events:
        demoted = admin.patch(f"/v1/users/{owner['id']}", json={"role": "partner"})
        assert demoted.status_code == 200, demoted.text
        events.until_ended()
    # The key is checked again as it reconnects: it now reads what a partner reads.
    other, product = create_user(admin), create_product(admin, stock=5)
    with stream(base, key) as events:
        place_order(admin, other, (product, 1)).raise_for_status()  # an admin's stream shows it
        placed = place_order(admin, owner, (product, 1))
        assert placed.status_code == 201, placed.text
        [event] = events.events(1)
    assert (event["event"], event["data"]["resource_id"]) == ("order.created", placed.json()["id"])
    assert event["data"]["actor_subject"] == ""


# What a stream ends by, once its credentials are no longer valid: within this of the change
# (the poller's reads, a revocation read on another process within a second), on a busy machine.
ENDS_WITHIN_SECONDS = 5


def _api_key(admin, owner: dict, scopes: list[str], **fields) -> tuple[int, dict]:
    issued = admin.post(
        "/v1/api-keys",
        json={"name": "feed", "scopes": scopes, "owner_id": owner["id"], **fields},
    )
    assert issued.status_code == 201, issued.text
    return issued.json()["id"], {"X-API-Key": issued.json()["key"]}


@pytest.mark.parametrize("where", ["here", "elsewhere"])
def test_an_api_keys_stream_ends_when_the_key_is_revoked(base, elsewhere, admin, where):
    """Revoked on this server process or another: the stream ends as an owner's change ends
    it, and shows nothing that happened after (here: what the process itself revoked, it knows
    before it reads another event)."""
    owner, other = create_user(admin, role="admin"), create_user(admin)
    product = create_product(admin, stock=5)
    key_id, key = _api_key(admin, owner, ["orders:read", "admin"])
    with (
        stream(base, key) as events,
        httpx.Client(
            base_url=base if where == "here" else elsewhere, headers=bearer(), timeout=WAIT_SECONDS
        ) as revoker,
    ):
        revoked = revoker.delete(f"/v1/api-keys/{key_id}")
        assert revoked.status_code == 204, revoked.text
        revoked_at = time.monotonic()
        placed = place_order(admin, other, (product, 1), note="private")
        assert placed.status_code == 201, placed.text
        received = events.until_ended()
        assert time.monotonic() - revoked_at < ENDS_WITHIN_SECONDS
        assert events.ended_cleanly
    if where == "here":
        assert [message for message in received if "data" in message] == []
    with stream(base, key) as again:
        again.response.read()
        assert_problem(again.response, 401)


def test_an_api_keys_stream_ends_when_the_key_expires(base, admin):
    owner = create_user(admin, role="partner")
    expires_at = time.time() + 3
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(expires_at))
    stamp += f".{int(expires_at % 1 * 1000):03d}Z"
    _, key = _api_key(admin, owner, ["products:read"], expires_at=stamp)
    with stream(base, key) as events:
        events.until_ended()
        ended_at = time.time()
    assert expires_at - 0.5 < ended_at < expires_at + ENDS_WITHIN_SECONDS
    with stream(base, key) as again:
        again.response.read()
        assert_problem(again.response, 401)


def test_a_tokens_stream_ends_at_the_tokens_expiry(base):
    """Whoever issued it: the stream is not served past `exp`, though the token is accepted
    a little longer (the clocks' leeway)."""
    expires_at = int(time.time()) + 3
    token = TOKENS.issue("client:short-lived", ["products:read"], exp=expires_at)
    with stream(base, {"Authorization": f"Bearer {token}"}) as events:
        events.until_ended()
        ended_at = time.time()
    assert expires_at - 1 < ended_at < expires_at + ENDS_WITHIN_SECONDS
