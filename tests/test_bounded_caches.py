"""Each cache a server process keeps stays within its bound whatever the clients do: the verified
tokens, the rate limits' window ends, the addresses blocked after failed authentication, the
compiled patterns. Why each is bounded as it is: bench/results/soak.md and the comment at each
bound."""

import asyncio
import hashlib
import time
import tracemalloc

import limits
import pytest

from shopapi.auth import tokens as token_module
from shopapi.auth.tokens import AccessTokens
from shopapi.contract.patterns import ecma_regex
from shopapi.pipeline import rate_limits
from shopapi.pipeline.limit_counter import LimitCounter, TooManyRequests
from shopapi.settings import Settings
from shopapi.web import counts, remembered_lists

SCOPES = ["products:read"]


def _tokens() -> AccessTokens:
    return AccessTokens(Settings(jwt_secret=b"bounded-caches-" * 3, access_token_ttl=900))


def test_verified_tokens_are_kept_up_to_the_bound_and_all_still_verify(monkeypatch):
    monkeypatch.setattr(token_module, "VERIFIED_CACHE_SIZE", 50)
    tokens = _tokens()
    issued = [tokens.issue(f"client:user-{n}", SCOPES) for n in range(120)]
    for token in issued:
        tokens.verify(token)
        assert tokens.remembered <= 50
    assert tokens.remembered >= 45  # room is made a tenth at a time, not emptied
    subjects = [tokens.verify(token)["sub"] for token in issued]
    assert subjects == [f"client:user-{n}" for n in range(120)]


def _bytes_kept(work, module) -> int:
    """The bytes that `work()` leaves allocated by `module` and by this file, whatever other
    threads of this process (an xdist worker's) allocate meanwhile."""
    mine = [
        tracemalloc.Filter(True, module.__file__, all_frames=True),
        tracemalloc.Filter(True, __file__, all_frames=True),
    ]
    tracemalloc.start(20)
    try:
        before = tracemalloc.take_snapshot().filter_traces(mine)
        work()
        after = tracemalloc.take_snapshot().filter_traces(mine)
    finally:
        tracemalloc.stop()
    return sum(stat.size_diff for stat in after.compare_to(before, "filename"))


def test_a_remembered_token_takes_a_fraction_of_its_size_and_its_claims():
    """A client's first request leaves its token in each worker's cache: under many clients it
    is what a worker's heap grows by (bench/results/soak-heap.md). Kept whole, with its claims
    as decoded, a token of ours took about 1.5 KB; under a digest, the claims all our tokens
    share kept once, about 0.6 KB."""
    tokens = _tokens()
    login = "a1b2c3d4" * 4
    scopes = ["orders:read", "orders:write", "products:read"]
    issued = [tokens.issue(str(n), scopes, cred_ver=3, sid=login) for n in range(1, 301)]

    def verify_each():
        for token in issued:
            # Each as a request brings it: a string of its own, split off the header.
            tokens.verify(f"Bearer {token}".split(maxsplit=1)[1])

    kept = _bytes_kept(verify_each, token_module)
    assert tokens.remembered == len(issued)
    assert kept / len(issued) < 1000, f"{kept / len(issued):.0f} bytes a token"


def test_expired_tokens_leave_the_cache_before_current_ones(monkeypatch):
    monkeypatch.setattr(token_module, "VERIFIED_CACHE_SIZE", 20)
    tokens = _tokens()
    leeway = token_module.EXPIRY_LEEWAY
    # Accepted for 10 more seconds (the leeway past `exp`), plenty to verify them on a busy
    # machine; then refused, cached or not.
    ending_at = int(time.time()) - leeway + 10
    ending = [tokens.issue(f"client:ending-{n}", SCOPES, exp=ending_at) for n in range(10)]
    current = [tokens.issue(f"client:current-{n}", SCOPES) for n in range(10)]
    for token in ending + current:
        tokens.verify(token)
    assert tokens.remembered == 20
    while time.time() <= ending_at + leeway + 1:  # until the ending ones have expired
        time.sleep(0.2)
    tokens.verify(tokens.issue("client:one-more", SCOPES))
    # The ten expired went, the ten current stayed (the oldest tenth would have taken two).
    assert tokens.remembered == 11


def test_rate_limit_windows_known_stay_within_the_bound():
    counter = LimitCounter("memory://", max_windows=10)
    per_minute = limits.parse("3/minute")

    async def callers():
        for n in range(25):
            assert (await counter.hit(per_minute, "list_products", f"caller-{n}")).count == 1
            assert counter.windows_known <= 10
        # Forgetting a window's end costs a storage call, not the count: the limit still holds.
        usages = [await counter.hit(per_minute, "list_products", "caller-0") for _ in range(3)]
        assert [usage.exceeded for usage in usages] == [False, False, True]
        assert 0 < usages[-1].reset_after <= 60

    asyncio.run(callers())


def test_rate_limit_windows_are_forgotten_once_they_end():
    counter = LimitCounter("memory://", forget_ended_every=0)
    per_second = limits.parse("5/second")

    async def callers():
        for n in range(20):
            await counter.hit(per_second, "list_products", f"caller-{n}")
        assert counter.windows_known == 20
        ended_by = time.time() + 1
        while time.time() <= ended_by:  # until every window of a second has ended
            await asyncio.sleep(0.05)
        await counter.hit(per_second, "list_products", "caller-new")
        assert counter.windows_known == 1

    asyncio.run(callers())


async def _refuses_credentials(scope, receive, send):
    await send({"type": "http.response.start", "status": 401, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def _guess_from(address: str) -> dict:
    return {
        "type": "http",
        "method": "GET",
        "path": "/v1/products",
        "client": (address, 40000),
        "headers": [(b"authorization", b"Bearer guess")],
        "state": {},
    }


def test_addresses_blocked_after_failed_authentication_stay_within_the_bound(monkeypatch):
    monkeypatch.setattr(rate_limits, "MAX_BLOCKED_ADDRESSES", 10)
    layer = rate_limits.FailedAuthMiddleware(
        _refuses_credentials, counter=LimitCounter("memory://"), limit=limits.parse("1/minute")
    )

    async def noop_receive():
        return {"type": "http.request", "body": b""}

    async def discard(message):
        pass

    async def guesses():
        for n in range(25):  # each address blocked by its first refusal
            await layer(_guess_from(f"192.0.2.{n}"), noop_receive, discard)
            assert layer.blocked_addresses <= 10
        # The latest are still known to be over the limit: a refusal more is a 429.
        with pytest.raises(TooManyRequests):
            await layer(_guess_from("192.0.2.24"), noop_receive, discard)

    asyncio.run(guesses())


def test_compiled_patterns_are_the_contracts_own_whatever_clients_send(client):
    def send(n: int) -> None:
        client.get(f"/v1/products?sort=name{n}%0A&fields=id,name{n}")
        client.post("/v1/products", json={"sku": f"SKU-{n}\n", "name": f"{n}", "price_cents": 1})

    send(0)  # each pattern of these operations compiled, once
    compiled = ecma_regex.cache_info().currsize
    for n in range(1, 30):
        send(n)
    assert compiled > 0 and ecma_regex.cache_info().currsize == compiled


def test_remembered_counts_stay_within_the_bound(client, monkeypatch):
    monkeypatch.setattr(counts, "MAX_COUNTS_KEPT", 5)
    monkeypatch.setattr(counts, "REMEMBERED_FROM", 0)  # these counts are 0 and 1 rows long
    monkeypatch.setattr(counts, "remembered", counts._Remembered())
    client.post("/v1/products", json={"sku": "B-1", "name": "B", "price_cents": 1, "stock": 1})
    for n in range(12):
        response = client.get(f"/v1/products?stock[gte]={n}")
        assert response.status_code == 200
        assert response.json()["meta"]["total"] == (1 if n <= 1 else 0)
        assert len(counts.remembered) <= 5
    assert len(counts.remembered) == 5


def _request(n: int) -> bytes:
    return hashlib.blake2b(str(n).encode(), digest_size=16).digest()


def test_revalidations_kept_stay_within_the_bound_at_a_few_hundred_bytes_each():
    """Each polled list a worker answered before Flask is kept under its request's digest, with
    a digest of its tables' versions (16 shards a table, about 200 characters each)."""
    kept = remembered_lists.RememberedLists(max_known=300)
    versions = "PostgresqlDatabase:shopapi/" + ",".join(f"product:{n}" for n in range(16))

    def note_each():
        for n in range(300):
            # The table names as a request's handler finds them: a set of its own each time.
            kept.note(_request(n), frozenset(["product"]), versions, f'W/"{n:043d}"')

    grown = _bytes_kept(note_each, remembered_lists)
    assert len(kept) == 300
    assert grown / 300 < 400, f"{grown / 300:.0f} bytes a revalidation"
    for n in range(300, 400):
        kept.note(_request(n), frozenset(["product"]), versions, f'W/"{n:043d}"')
    assert len(kept) == 300
    assert kept.get(_request(99)) is None  # the least recently revalidated went first
    assert kept.get(_request(100)).tag == f'W/"{100:043d}"'
