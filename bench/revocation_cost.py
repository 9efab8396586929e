"""What the revocation check costs a request (shopapi/auth/revocations.py): authenticated
`GET /v1/products/{id}` through the whole app (every middleware, Connexion, Flask, the database),
with the check as shipped (A) and without it (B, monkeypatched here only), in one process.

The check is a lookup in memory on every request, plus a refresh (one query, in a worker
thread) at most once a second. The two are measured apart, because how often a refresh falls
on a request depends on the request rate (and under valgrind, on valgrind's slowdown):
- `lookup`: A against B with the refresh held off (the table current throughout);
- `refresh`: A with a refresh before every request against A without;
- the cost per request at a given rate is then lookup + refresh / (requests a second).
The CPU run also measures A against B as shipped (a refresh a second, at this script's rate).

Two measures:
- CPU time (`time.process_time`: every thread of the process, the refresh thread included) of
  each request, A and B alternating request by request, so that the machine's load, which
  drifts, weighs on both alike; means and their standard errors;
- instructions, with valgrind's callgrind (`--instructions`): blocks of requests, A and B
  alternating (A B B A ...), each counted on its own (the script calls `os.getsid` between
  blocks, and callgrind is told to dump its counts before that function); medians. Then the
  lookup alone, a loop of calls A against B.

The token is that of a user with no revocation, among REVOKED_USERS users that have one, so
the lookup is made in a populated table.

    python bench/revocation_cost.py                  # CPU time, SQLite (a temporary file)
    python bench/revocation_cost.py --instructions   # callgrind: about ten minutes
    BENCH_DATABASE_URL=postgresql://... python bench/revocation_cost.py [--instructions]

`make bench` runs the CPU measure on PostgreSQL, in a database of its own
(shopapi_bench_revocation), after bench/load.py.

Prints a table and writes it to bench/results/revocation-cost-{cpu,instructions}.md.
"""

import argparse
import asyncio
import datetime
import logging
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import shopapi.auth.revocations  # noqa: E402
from app import create_app  # noqa: E402
from models import Product, Revocation, User  # noqa: E402
from models.db import (  # noqa: E402
    create_database_if_missing,
    database,
    open_database,
    use,
)
from models.migrations import migrate  # noqa: E402
from shopapi.auth import security  # noqa: E402
from shopapi.auth.tokens import CREDENTIALS_VERSION, LOGIN  # noqa: E402
from shopapi.settings import Settings  # noqa: E402
from shopapi.web.configured import configured  # noqa: E402

JWT_SECRET = "bench-only-secret-0123456789abcdef"  # noqa: S105
REVOKED_USERS = 10_000
# The login the bench's token was issued to (a refresh token family's id), which is not ended.
BENCH_LOGIN = "0" * 32
RESULTS = ROOT / "bench" / "results"
_SHIPPED_CHECK = security._unless_revoked


def _no_check(revocations, info):
    return info


def _arm(name: str) -> None:
    security._unless_revoked = _SHIPPED_CHECK if name == "A" else _no_check


class Bench:
    def __init__(self, database_url: str):
        db = open_database(database_url)
        migrate(db)
        use(db)
        with database.connection_context():
            for model in (Revocation, Product, User):
                model.delete().execute()
            product = Product.create(sku="BENCH-1", name="Mug", price_cents=1000, stock=5)
            user = User.create(email="bench@example.com", name="B", password_hash="-")  # noqa: S106
            now = datetime.datetime.now(datetime.UTC)
            rows = [
                {"user_id": user.id + n, "credentials_version": 1, "revoked_at": now}
                for n in range(1, REVOKED_USERS + 1)
            ]
            with database.atomic():
                for start in range(0, len(rows), 1000):
                    Revocation.insert_many(rows[start : start + 1000]).execute()
        settings = Settings(
            database_url=database_url, jwt_secret=JWT_SECRET.encode(), rate_limit_scale=1e6
        )
        self.app = create_app(settings)
        # Each request's log line would be most of what the output holds (and the same in A
        # and B): off.
        logging.getLogger("shopapi.requests").setLevel(logging.WARNING)
        with self.app.app.app_context():
            tokens = configured().tokens
        claims = {CREDENTIALS_VERSION: 0, LOGIN: BENCH_LOGIN}
        token = tokens.issue(str(user.id), ["products:read"], **claims)
        self.path = f"/v1/products/{product.id}"
        self.headers = [
            (b"host", b"bench"),
            (b"authorization", f"Bearer {token}".encode()),
            (b"accept", b"application/json"),
        ]
        self.loop = asyncio.new_event_loop()

    async def _get(self) -> int:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": self.path,
            "raw_path": self.path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": self.headers,
            "client": ("127.0.0.1", 50000),
            "server": ("bench", 80),
        }
        status = None

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]

        await self.app(scope, receive, send)
        return status

    def run(self, requests: int) -> None:
        async def many():
            for _ in range(requests):
                status = await self._get()
                if status != 200:
                    raise RuntimeError(f"GET {self.path} answered {status}")

        self.loop.run_until_complete(many())


# The load benchmark's rate per worker (bench/results/profile.md): what a refresh a second is
# shared among.
REQUESTS_PER_SECOND = 230


def _blocks(rounds: int) -> list[str]:
    return [name for n in range(rounds) for name in (("A", "B") if n % 2 == 0 else ("B", "A"))]


def _refresh_every(bench: Bench, seconds: float) -> None:
    """Refresh the check's table every `seconds` from now on (the next check refreshes)."""
    shopapi.auth.revocations.REFRESH_EVERY = seconds
    _stale(bench)


def _stale(bench: Bench) -> None:
    """The next check refreshes the table first."""
    security.revocations_of(bench.app)._fresh_until = float("-inf")


def _current(bench: Bench) -> None:
    """The next checks take the table as current."""
    security.revocations_of(bench.app)._fresh_until = float("inf")


def cpu(bench: Bench, pairs: int) -> dict[str, list[float]]:
    """CPU seconds of each request, in three series of `pairs` pairs, the two of a pair one
    request after the other (so that the machine's load, which drifts, weighs on both alike):
    A and B as shipped; A and B with the table current (`lookup`); A refreshing first and A
    with the table current (`refreshing`, `current`)."""
    per_request = {name: [] for name in ("A", "B", "A lookup", "B lookup")}
    per_request.update({"A refreshing": [], "A current": []})
    series = (
        (("A", "A", None), ("B", "B", None)),
        (("A lookup", "A", _current), ("B lookup", "B", _current)),
        (("A refreshing", "A", _stale), ("A current", "A", _current)),
    )
    for pair in series:
        for n in range(pairs):
            for name, arm, before in pair if n % 2 == 0 else pair[::-1]:
                _arm(arm)
                if before is not None:
                    before(bench)
                started = time.process_time()
                bench.run(1)
                per_request[name].append(time.process_time() - started)
        _refresh_every(bench, 1.0)
    _arm("A")
    return per_request


def _lookups(bench: Bench, check, calls: int) -> None:
    revocations = security.revocations_of(bench.app)
    info = {
        "sub": "1",
        "scope": "products:read",
        "user_id": 1,
        "credentials_version": 0,
        "login": BENCH_LOGIN,
    }
    for _ in range(calls):
        check(revocations, info)


def check_alone(bench: Bench, calls: int = 1_000_000) -> float:
    """Seconds per call of the lookup alone (the table current): what it adds to a request,
    without the noise of everything else."""
    _refresh_every(bench, 3600.0)
    bench.run(1)  # a refresh, for the hour
    revocations = security.revocations_of(bench.app)
    assert revocations.is_current() and len(revocations._valid_from) == REVOKED_USERS
    started = time.perf_counter()
    _lookups(bench, _SHIPPED_CHECK, calls)
    checked = time.perf_counter() - started
    started = time.perf_counter()
    _lookups(bench, _no_check, calls)
    bare = time.perf_counter() - started
    _refresh_every(bench, 1.0)
    return (checked - bare) / calls


LOOKUPS = 100_000


def phases(bench: Bench, requests: int, rounds: int) -> None:
    """Under callgrind: warm up, then the blocks of `instructions`, a dump before each."""
    bench.run(100)
    _refresh_every(bench, 3600.0)
    for name in [*_blocks(rounds), "A refreshing"]:
        _arm(name[0])
        if name == "A refreshing":
            _refresh_every(bench, 0.0)
        os.getsid(0)  # callgrind dumps here: the counts since the previous dump
        bench.run(requests)
    os.getsid(0)
    _refresh_every(bench, 3600.0)
    bench.run(1)  # a refresh, for the hour
    for check in (_SHIPPED_CHECK, _no_check):
        os.getsid(0)
        _lookups(bench, check, LOOKUPS)
    os.getsid(0)


def instructions(database_url: str, requests: int, rounds: int) -> dict[str, list[float]]:
    """Instructions per request of each block, counted by callgrind: A and B with the table
    current (`lookup`), then A refreshing on every request."""
    with tempfile.TemporaryDirectory() as scratch:
        out = pathlib.Path(scratch) / "callgrind.out"
        subprocess.run(  # noqa: S603 (our own script)
            [
                shutil.which("valgrind") or "valgrind",
                "--tool=callgrind",
                "--dump-before=getsid",
                f"--callgrind-out-file={out}",
                sys.executable,
                __file__,
                "--phases",
                "--requests",
                str(requests),
                "--rounds",
                str(rounds),
            ],
            check=True,
            env={**os.environ, "BENCH_DATABASE_URL": database_url},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        # callgrind.out.1, .2, ...: one a dump, in order (callgrind.out itself is the exit's).
        dumps = sorted(
            pathlib.Path(scratch).glob("callgrind.out.*"),
            key=lambda p: int(p.name.rpartition(".")[2]),
        )
        counts = []
        for dump in dumps:
            summary = re.search(r"^(?:summary|totals): (\d+)", dump.read_text(), re.M)
            counts.append(int(summary.group(1)) if summary else 0)
    # The first dump is start-up and warm-up, each next one a block; then (after a dump of a
    # request that refreshes) the lookups alone, A and B.
    names = [f"{name} lookup" for name in _blocks(rounds)] + ["A refreshing"]
    per_request = {"A lookup": [], "B lookup": [], "A refreshing": []}
    for name, count in zip(names, counts[1 : 1 + len(names)], strict=True):
        per_request[name].append(count / requests)
    alone_a, alone_b = counts[2 + len(names) : 4 + len(names)]
    per_request["lookup alone"] = [(alone_a - alone_b) / LOOKUPS]
    return per_request


def _difference(a: list[float], b: list[float], average) -> tuple[float, float | None]:
    """average(a) - average(b), and its standard error when the averages are means of many
    values (None for a median of a few blocks)."""
    if average is statistics.median or len(a) < 100:
        return average(a) - average(b), None
    error = (statistics.variance(a) / len(a) + statistics.variance(b) / len(b)) ** 0.5
    return average(a) - average(b), error


def _table(
    per_request: dict[str, list[float]],
    scale: float,
    unit: str,
    fmt: str,
    average=statistics.median,
) -> list[str]:
    def show(value: float, error: float | None = None) -> str:
        shown = f"{value * scale:{fmt}}" + (f" ± {error * scale:{fmt}}" if error else "")
        return f"{shown} {unit}".strip()

    current = per_request.get("A current") or per_request["A lookup"]
    lookup, lookup_error = _difference(per_request["A lookup"], per_request["B lookup"], average)
    refresh, refresh_error = _difference(per_request["A refreshing"], current, average)
    amortised = refresh / REQUESTS_PER_SECOND
    rows = [
        "| | per request |",
        "|---|---|",
        f"| B: no check (table current) | {show(average(per_request['B lookup']))} |",
        f"| A: the lookup (table current) | {show(average(per_request['A lookup']))} |",
        f"| A: a refresh on every request | {show(average(per_request['A refreshing']))} |",
        f"| A: the table current (beside those) | {show(average(current))} |",
        f"| **the lookup** (A - B) | **{show(lookup, lookup_error)}** |",
        f"| one refresh (refreshing - current) | {show(refresh, refresh_error)} |",
        f"| **a refresh a second at {REQUESTS_PER_SECOND} requests/s, per request** "
        f"| **{show(amortised)}** |",
        f"| **the check at {REQUESTS_PER_SECOND} requests/s** (lookup + that) "
        f"| **{show(lookup + amortised)}** |",
    ]
    if "A" in per_request:
        shipped, error = _difference(per_request["A"], per_request["B"], average)
        rows.append(f"| as shipped at this run's rate (A - B) | {show(shipped, error)} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--requests", type=int, help="A/B pairs of each series (CPU); requests a block (callgrind)"
    )
    parser.add_argument("--rounds", type=int, help="A B B A rounds (callgrind)")
    parser.add_argument("--instructions", action="store_true")
    parser.add_argument("--phases", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        url = os.environ.get("BENCH_DATABASE_URL", f"sqlite:///{scratch}/bench.db")
        if url.startswith("postgres"):
            create_database_if_missing(url)  # its own: it empties the users and products it finds
        if args.phases:
            phases(Bench(url), args.requests, args.rounds)
            return
        if args.instructions:
            requests, rounds = args.requests or 300, args.rounds or 3
            measure = f"instructions (callgrind), {rounds * 2 + 1} blocks of {requests}, medians"
            counts = instructions(url, requests, rounds)
            rows = _table(counts, 1, "", ",.0f")
            alone = counts["lookup alone"][0]
            rows += ["", f"The lookup alone, in a loop: {alone:,.0f} instructions a call."]
        else:
            pairs = args.requests or 5000
            bench = Bench(url)
            bench.run(500)  # warm-up
            measure = (
                f"CPU time of each request, 3 series of {pairs:,} A/B pairs, means (± their "
                "standard error)"
            )
            rows = _table(cpu(bench, pairs), 1000, "ms", ",.4f", average=statistics.fmean)
            alone = check_alone(bench)
            rows += ["", f"The lookup alone, in a loop: {alone * 1e9:,.0f} ns a call."]
    text = "\n".join(
        [
            "# What the revocation check costs a request",
            "",
            f"`GET /v1/products/{{id}}` with a user's bearer token through the whole app on "
            f"{url.partition(':')[0]}, {REVOKED_USERS:,} users revoked; {measure}. "
            "A: the check as shipped; B: without it. Request logs off.",
            "",
            *rows,
        ]
    )
    print(text)
    name = "instructions" if args.instructions else "cpu"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"revocation-cost-{name}.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
