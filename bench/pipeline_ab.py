"""App CPU per request of this tree against another revision's, in one run (`make bench-ab
BASE=<rev>`): each tree's app in a process of its own on PostgreSQL, the same requests driven
straight through its ASGI pipeline (no HTTP server, no client library to dilute the difference),
in interleaved rounds; the medians and their ratio. Writes bench/results/pipeline-ab.md.

    BENCH_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/shopapi_ab \
        python bench/pipeline_ab.py --base 711f085
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import child_process  # noqa: E402

URL = os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/shopapi_ab")
ROUNDS = int(os.environ.get("AB_ROUNDS", 9))
REQUESTS_PER_ROUND, WARM_UP = 400, 200
INSTRUCTION_MIXES = 25  # callgrind runs the app about fifty times slower
MIXED = {
    "list": "a list of 20 sorted",
    "list_v3": "v3's list of 20 sorted by price.amount",
    "product": "a product",
    "filtered": "a filtered list",
    "order": "an order placed with an Idempotency-Key",
    "revalidated": "the list revalidated with If-None-Match (304)",
    "orders": "a list of 20 orders with their items",
    "patch": "a product patched",
}
# AB_REQUESTS=list or AB_REQUESTS=order: the mix is only those requests (the child reads it too).
# `revalidated` is not in the default mix: the order placed before it changes the list.
PER_MIX = os.environ.get("AB_REQUESTS", "list,list_v3,product,filtered,order").split(",")
# AB_SHARED_STORE_URL=redis://127.0.0.1:6379/15: the rate limits counted in Redis, not memory.
STORE = os.environ.get("AB_SHARED_STORE_URL", "memory://")
# AB_REPLICAS=1: each tree's database named again as its replica, a stand-in that never replays
# (reads still go to the primary), so that every read looks up its caller's write mark as it does
# beside a real standby (in the shared store: with AB_SHARED_STORE_URL, in Redis).
REPLICAS = bool(os.environ.get("AB_REPLICAS"))
WITH_REPLICAS = "; a replica named (the tree's own database: AB_REPLICAS)" if REPLICAS else ""
MIX = ", ".join(MIXED[name] for name in PER_MIX)
RESULTS = ROOT / "bench" / "results"

# Run inside each tree (its own modules on sys.path): builds the app on its own database, then
# answers "run <n>" with the CPU seconds <n> rounds of the mix took, as a JSON line.
CHILD = r"""
import asyncio, itertools, json, subprocess, sys, time
from app import create_app
from models import MODELS
from models.db import create_database_if_missing, open_database, use
from models.migrations import migrate
from shopapi.settings import Settings
try:
    from shopapi.auth.tokens import AccessTokens
except ImportError:
    from shopapi.tokens import AccessTokens
from models.user import SCOPES

import os
RESULTS = os.fdopen(int(sys.argv[2]), "w")
url, secret = sys.argv[1], b"bench-only-secret-0123456789abcdef"
create_database_if_missing(url)
db = open_database(url)
use(db)
with db.connection_context():
    db.drop_tables(MODELS, safe=True, cascade=True)
    db.execute_sql("DROP TABLE IF EXISTS schema_migrations")
    db.execute_sql("DROP TABLE IF EXISTS table_version")
    db.execute_sql("DROP TABLE IF EXISTS sequence_advance")
migrate(db)
db.close_all()
store = os.environ.get("AB_SHARED_STORE_URL", "memory://")
replicas = (url,) if os.environ.get("AB_REPLICAS") else ()
app = create_app(
    Settings(database_url=url, jwt_secret=secret, rate_limit_scale=100000, shared_store_url=store,
             database_replica_urls=replicas)
)
token = AccessTokens(Settings(jwt_secret=secret)).issue("client:bench", SCOPES)
auth = [(b"authorization", f"Bearer {token}".encode())]
keys = itertools.count(1)
tags = {}  # the ETag of the last answer that had one


async def call(method, path, query=b"", headers=(), body=b""):
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": query,
        "root_path": "", "client": ("127.0.0.1", 50000),
        "headers": [*auth, *headers, (b"content-length", str(len(body)).encode())],
        "server": ("127.0.0.1", 8000), "state": {}, "extensions": {},
    }
    delivered = False

    async def receive():
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)

    status, answer = [], []

    async def send(message):
        if message["type"] == "http.response.start":
            status.append(message["status"])
            tags.update((name, value) for name, value in message["headers"] if name == b"etag")
        elif message["type"] == "http.response.body":
            answer.append(message.get("body", b""))

    await app(scope, receive, send)
    if status[0] >= 400:
        print(method, path, status[0], b"".join(answer)[:300], file=sys.stderr)
    return status[0]


JSON = [(b"content-type", b"application/json")]


async def sorted_list():
    assert await call("GET", "/v1/products", b"per_page=20&sort=-price_cents") == 200


async def sorted_list_v3():
    assert await call("GET", "/v3/products", b"per_page=20&sort=-price.amount") == 200


async def product():
    assert await call("GET", "/v1/products/7") == 200


async def filtered_list():
    assert await call("GET", "/v1/products", b"category=books&price_cents[gte]=500") == 200


async def keyed_order():
    order = json.dumps({"user_id": 1, "items": [{"product_id": 3, "quantity": 1}]}).encode()
    key = [(b"idempotency-key", f"bench-{next(keys)}".encode())]
    assert await call("POST", "/v1/orders", b"", [*JSON, *key], order) == 201


async def orders_list():
    assert await call("GET", "/v1/orders", b"sort=-created_at&per_page=20") == 200


async def patched_product():
    change = json.dumps({"stock": 1_000_000 + next(keys)}).encode()
    merge = [(b"content-type", b"application/merge-patch+json")]
    assert await call("PATCH", "/v1/products/9", b"", merge, change) == 200


async def revalidated_list():
    if b"etag" not in tags:
        await sorted_list()
    conditional = [(b"if-none-match", tags[b"etag"])]
    assert await call("GET", "/v1/products", b"per_page=20&sort=-price_cents", conditional) == 304


# The requests of a mix: AB_REQUESTS names them (`list,order`).
REQUESTS = {
    "list": sorted_list, "list_v3": sorted_list_v3, "product": product,
    "filtered": filtered_list, "order": keyed_order, "revalidated": revalidated_list,
    "orders": orders_list, "patch": patched_product,
}
chosen = [REQUESTS[name] for name in os.environ["AB_REQUESTS"].split(",")]


async def mix():
    for request in chosen:
        await request()


def callgrind_counts(state):
    control = ["callgrind_control", "-i", state, str(os.getpid())]
    subprocess.run(control, check=True, capture_output=True)


async def main():
    user = {"email": "buyer@example.com", "name": "Buyer", "password": "correct horse"}
    assert await call("POST", "/v1/users", b"", JSON, json.dumps(user).encode()) == 201
    for n in range(50):
        product = {"sku": f"SKU-{n}", "name": f"Product {n}", "price_cents": 100 + 37 * n,
                   "currency": "EUR", "stock": 1_000_000,
                   "category": "books" if n % 2 else "music"}
        assert await call("POST", "/v1/products", b"", JSON, json.dumps(product).encode()) == 201
    for n in range(20):  # what the list of orders lists
        items = [{"product_id": 1 + n, "quantity": 1}, {"product_id": 21 + n, "quantity": 2}]
        order = json.dumps({"user_id": 1, "items": items}).encode()
        assert await call("POST", "/v1/orders", b"", JSON, order) == 201
    for line in sys.stdin:
        rounds = int(line.split()[1])
        counting = line.split()[0] == "count"  # under callgrind: these rounds' instructions
        if counting:
            callgrind_counts("on")
        started = time.process_time()
        for _ in range(rounds):
            await mix()
        cpu_seconds = time.process_time() - started
        if counting:
            callgrind_counts("off")
        print(json.dumps({"cpu_seconds": cpu_seconds}), file=RESULTS, flush=True)


asyncio.run(main())
"""


def tree_of(revision: str, into: pathlib.Path) -> pathlib.Path:
    into.mkdir()
    archive = subprocess.run(  # noqa: S603 (git, our arguments)
        ["git", "archive", revision],  # noqa: S607
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)  # noqa: S603, S607
    return into


def start(tree: pathlib.Path, database: str, callgrind_out: pathlib.Path | None = None):
    """The tree's app in a process of its own (bench/child_process.py); with `callgrind_out`,
    under callgrind, counting nothing until asked to (`count <n>`)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    return child_process.start(CHILD, [database], tree, env, callgrind_out)


def cpu_ms_per_request(process: subprocess.Popen, mixes: int) -> float:
    process.stdin.write(f"run {mixes}\n")
    process.stdin.flush()
    answer = json.loads(process.results.readline())
    return answer["cpu_seconds"] * 1000 / (mixes * len(PER_MIX))


def instructions_per_request(tree: pathlib.Path, database: str, scratch: pathlib.Path) -> float:
    """Instructions per request of `tree`'s app over INSTRUCTION_MIXES mixes, counted by
    callgrind (every thread, the app's own process only), after the same warm-up."""
    out = scratch / f"callgrind.{tree.name}"
    process = start(tree, database, callgrind_out=out)
    cpu_ms_per_request(process, WARM_UP // len(PER_MIX))
    process.stdin.write(f"count {INSTRUCTION_MIXES}\n")
    process.stdin.flush()
    process.results.readline()
    process.stdin.close()
    process.wait(timeout=600)
    return child_process.instructions_counted(out) / (INSTRUCTION_MIXES * len(PER_MIX))


def compare_cpu(trees: dict[str, pathlib.Path], databases: dict[str, str]) -> list[str]:
    servers = {name: start(tree, databases[name]) for name, tree in trees.items()}
    costs = {name: [] for name in servers}
    try:
        for process in servers.values():
            cpu_ms_per_request(process, WARM_UP // len(PER_MIX))
        for _ in range(ROUNDS):
            for name, process in servers.items():
                costs[name].append(cpu_ms_per_request(process, REQUESTS_PER_ROUND // len(PER_MIX)))
    finally:
        for process in servers.values():
            process.stdin.close()
            process.wait(timeout=30)
    medians = {name: statistics.median(values) for name, values in costs.items()}
    (base, base_ms), (head, head_ms) = medians.items()
    return [
        "# App CPU per request, this tree against a base revision (bench/pipeline_ab.py)",
        "",
        f"The mix ({MIX}), {ROUNDS} interleaved rounds of {REQUESTS_PER_ROUND} requests per "
        "tree, through each app's whole ASGI pipeline on PostgreSQL; CPU of the app's process "
        f"only (the database's is not in it). Rate limits counted in {STORE}"
        f"{WITH_REPLICAS}.",
        "",
        "| tree | median CPU-ms/request | rounds (CPU-ms/request) |",
        "| --- | --- | --- |",
        *(
            f"| {name} | {medians[name]:.3f} | {', '.join(f'{v:.3f}' for v in values)} |"
            for name, values in costs.items()
        ),
        "",
        f"Ratio, {head} / {base}: **{head_ms / base_ms:.3f}**",
    ]


def compare_instructions(
    trees: dict[str, pathlib.Path], databases: dict[str, str], scratch: pathlib.Path
) -> list[str]:
    counts = {
        name: instructions_per_request(tree, databases[name], scratch)
        for name, tree in trees.items()
    }
    (base, base_ir), (head, head_ir) = counts.items()
    return [
        "# Instructions per request, this tree against a base revision (bench/pipeline_ab.py)",
        "",
        f"The mix ({MIX}), {INSTRUCTION_MIXES * len(PER_MIX)} requests per tree after "
        f"{WARM_UP} of warm-up, "
        "through each app's whole ASGI pipeline on PostgreSQL, counted by callgrind in the app's "
        "process (every thread; the database's are not in it). Steadier than CPU time on a "
        f"shared machine, for small differences. Rate limits counted in {STORE}"
        f"{WITH_REPLICAS}.",
        "",
        "| tree | instructions/request |",
        "| --- | --- |",
        *(f"| {name} | {value:,.0f} |" for name, value in counts.items()),
        "",
        f"Ratio, {head} / {base}: **{head_ir / base_ir:.3f}**",
    ]


def _short(revision: str) -> str:
    return subprocess.run(  # noqa: S603
        ["git", "rev-parse", "--short", revision],  # noqa: S607
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the revision to compare against")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions with callgrind (Debian's valgrind) instead of timing CPU",
    )
    parser.add_argument(
        "--head", help="a revision to compare instead of this tree (the work tree as it is)"
    )
    parser.add_argument("--out", help="the result's file name in bench/results/")
    args = parser.parse_args()
    os.environ["AB_REQUESTS"] = ",".join(PER_MIX)  # the children's mix
    base_name = _short(args.base)
    head_name = f"head ({_short(args.head)})" if args.head else "this tree"
    with tempfile.TemporaryDirectory(prefix="shopapi-ab-") as temp:
        scratch = pathlib.Path(temp)
        base_tree = tree_of(args.base, scratch / "base")
        head_tree = tree_of(args.head, scratch / "head") if args.head else ROOT
        trees = {f"base ({base_name})": base_tree, head_name: head_tree}
        databases = {f"base ({base_name})": URL + "_base", head_name: URL + "_head"}
        if args.instructions:
            lines, result = (
                compare_instructions(trees, databases, scratch),
                "pipeline-ab-instructions.md",
            )
        else:
            lines, result = compare_cpu(trees, databases), "pipeline-ab.md"
    report = "\n".join(lines) + "\n"
    print(report)
    (RESULTS / (args.out or result)).write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
