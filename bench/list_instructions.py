"""Is it the code or the processor? The v1 list's cost in instructions (callgrind) beside CPU
time, for shopapi, the stack's floor and the plain baseline, each app driven in a process of its
own straight through its own interface (shopapi and the floor through ASGI, the baseline through
WSGI: no HTTP server, whose parsing each of them would add alike) on the load benchmark's data
set. Instructions per request do not change with the processor; CPU time does. If shopapi's
ratio to the floor is steady in instructions but moves in CPU time from one machine to another,
what moves it is how the processor runs the same instructions, not what shopapi does.

`make bench` runs it after bench/load.py: bench/results/list-instructions.{md,json}.

    BENCH_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/shopapi_bench \
        python bench/list_instructions.py
"""

import json
import os
import pathlib
import platform
import statistics
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import child_process  # noqa: E402
from bench.seed import URL, seed  # noqa: E402

RESULTS = ROOT / "bench" / "results"
REDIS = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
APPS = ("baseline", "floor", "shopapi")
WARM_UP, ROUNDS, PER_ROUND = 300, 7, 300
COUNTED = 60  # callgrind runs an app about fifty times slower

# Run in each app's process: builds the app, then answers "run <n>" (or, under callgrind,
# "count <n>": those requests' instructions counted) with the CPU seconds <n> list requests took.
CHILD = r"""
import asyncio, itertools, json, os, subprocess, sys, time

kind, results = sys.argv[1], os.fdopen(int(sys.argv[2]), "w")
categories = itertools.cycle(("books", "kitchen", "garden", "toys"))
query = "category={}&sort=-price_cents&per_page=20"
status = []

if kind == "baseline":
    from bench.baseline_app import create_app

    app = create_app()

    def start_response(line, headers, exc_info=None):
        status.append(int(line[:3]))

    async def one(headers):
        environ = {
            "REQUEST_METHOD": "GET", "SCRIPT_NAME": "", "PATH_INFO": "/v1/products",
            "QUERY_STRING": query.format(next(categories)), "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8000", "SERVER_PROTOCOL": "HTTP/1.1", "REMOTE_ADDR": "127.0.0.1",
            "wsgi.url_scheme": "http", "wsgi.input": sys.stdin.buffer, "wsgi.errors": sys.stderr,
            "wsgi.multithread": False, "wsgi.multiprocess": True, "wsgi.run_once": False,
            **{"HTTP_" + name.upper().replace("-", "_"): value for name, value in headers},
        }
        body = app(environ, start_response)
        b"".join(body)
        getattr(body, "close", lambda: None)()
else:
    if kind == "floor":
        from bench.floor_app import create_app

        app = create_app()
    else:
        from app import create_app

        app = create_app()

    async def one(headers):
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
            "scheme": "http", "path": "/v1/products", "raw_path": b"/v1/products",
            "query_string": query.format(next(categories)).encode(), "root_path": "",
            "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000),
            "headers": [(name.encode(), value.encode()) for name, value in headers],
            "state": {}, "extensions": {},
        }
        sent = False

        async def receive():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await asyncio.sleep(3600)

        async def send(message):
            if message["type"] == "http.response.start":
                status.append(message["status"])

        await app(scope, receive, send)

tokens = json.loads(os.environ["LIST_TOKENS"])
callers = itertools.cycle([[("authorization", f"Bearer {token}")] for token in tokens])


async def main():
    for line in sys.stdin:
        word, n = line.split()
        if word == "count":
            subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], check=True,
                           capture_output=True)
        started = time.process_time()
        for _ in range(int(n)):
            await one(next(callers))
        cpu_seconds = time.process_time() - started
        if word == "count":
            subprocess.run(["callgrind_control", "-i", "off", str(os.getpid())], check=True,
                           capture_output=True)
        refused = [s for s in status if s != 200]
        status.clear()
        print(json.dumps({"cpu_seconds": cpu_seconds, "refused": refused[:5]}), file=results,
              flush=True)


asyncio.run(main())
"""


def _environment(secrets: dict) -> dict:
    """shopapi as bench/load.py serves it (its real rate limits, Redis), minus the server."""
    env = {**os.environ, **secrets, "PYTHONPATH": str(ROOT), "BENCH_DATABASE_URL": URL}
    env.update(DATABASE_URL=URL, SHARED_STORE_URL=REDIS, LOG_LEVEL="WARNING")
    env.pop("RATE_LIMIT_SCALE", None)
    return env


def _start(kind: str, env: dict, callgrind_out: pathlib.Path | None = None):
    return child_process.start(CHILD, [kind], ROOT, env, callgrind_out)


def _ask(process, word: str, requests: int) -> float:
    """CPU-ms per request of `requests` list requests."""
    process.stdin.write(f"{word} {requests}\n")
    process.stdin.flush()
    answer = json.loads(process.results.readline())
    if answer["refused"]:
        raise SystemExit(f"the list was answered {answer['refused']}")
    return answer["cpu_seconds"] * 1000 / requests


def _stop(process) -> None:
    process.stdin.close()
    process.wait(timeout=600)


def cpu_ms(env: dict) -> dict[str, list[float]]:
    """CPU-ms per request of each app, in interleaved rounds."""
    processes = {kind: _start(kind, env) for kind in APPS}
    rounds = {kind: [] for kind in APPS}
    try:
        for process in processes.values():
            _ask(process, "run", WARM_UP)
        for _ in range(ROUNDS):
            for kind, process in processes.items():
                rounds[kind].append(_ask(process, "run", PER_ROUND))
    finally:
        for process in processes.values():
            _stop(process)
    return rounds


def instructions(kind: str, env: dict, scratch: pathlib.Path) -> float:
    """Instructions per request of `kind`'s app (every thread of its process), after warm-up."""
    out = scratch / f"callgrind.{kind}"
    process = _start(kind, env, callgrind_out=out)
    _ask(process, "run", WARM_UP)
    _ask(process, "count", COUNTED)
    _stop(process)
    return child_process.instructions_counted(out) / COUNTED


def _processor() -> str:
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.partition(":")[2].strip()
    return platform.machine()


def report(cpu: dict[str, float], counted: dict[str, float]) -> list[str]:
    def ratio(values, kind, to):
        return values[kind] / values[to]

    rows = [
        f"| {kind} | {counted[kind] / 1e6:.2f} | {cpu[kind]:.3f} |"
        f" {cpu[kind] * 1e6 / counted[kind]:.3f} |"
        for kind in APPS
    ]
    return [
        "# The v1 list in instructions and in CPU time (bench/list_instructions.py)",
        "",
        f"{_processor()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}. The load benchmark's list (a category, `-price_cents`, 20 a "
        "page, v1's exact count) on its data set, each app in a process of its own driven through "
        "its own interface (no HTTP server); the app's process only (PostgreSQL's is not in it). "
        f"CPU: medians of {ROUNDS} interleaved rounds of {PER_ROUND} after {WARM_UP} of warm-up. "
        f"Instructions: {COUNTED} requests counted by callgrind (every thread) after the same "
        "warm-up.",
        "",
        "| app | million instructions/request | CPU-ms/request | ns per instruction |",
        "|---|---|---|---|",
        *rows,
        "",
        "| ratio | instructions | CPU time |",
        "|---|---|---|",
        f"| shopapi / floor | {ratio(counted, 'shopapi', 'floor'):.2f}x |"
        f" {ratio(cpu, 'shopapi', 'floor'):.2f}x |",
        f"| floor / baseline | {ratio(counted, 'floor', 'baseline'):.2f}x |"
        f" {ratio(cpu, 'floor', 'baseline'):.2f}x |",
        f"| shopapi / baseline | {ratio(counted, 'shopapi', 'baseline'):.2f}x |"
        f" {ratio(cpu, 'shopapi', 'baseline'):.2f}x |",
    ]


def main() -> int:
    seed(URL)
    from models.user import ROLE_SCOPES
    from shopapi.auth.tokens import AccessTokens
    from shopapi.settings import Settings

    secrets = {"JWT_SECRET": "bench-only-secret-0123456789abcdef", "ACCESS_TOKEN_TTL": "3600"}
    issuer = AccessTokens(
        Settings(jwt_secret=secrets["JWT_SECRET"].encode(), access_token_ttl=3600)
    )
    # Customers of the data set, as the load's clients are, each under the list's limit.
    secrets["LIST_TOKENS"] = json.dumps(
        [issuer.issue(str(user), ROLE_SCOPES["customer"]) for user in range(1, 41)]
    )
    env = _environment(secrets)
    rounds = cpu_ms(env)
    cpu = {kind: statistics.median(values) for kind, values in rounds.items()}
    with tempfile.TemporaryDirectory(prefix="shopapi-instructions-") as scratch:
        counted = {kind: instructions(kind, env, pathlib.Path(scratch)) for kind in APPS}
    lines = report(cpu, counted)
    print("\n".join(lines))
    (RESULTS / "list-instructions.md").write_text("\n".join(lines) + "\n")
    facts = {"cpu_ms": rounds, "instructions": counted, "processor": _processor()}
    (RESULTS / "list-instructions.json").write_text(json.dumps(facts, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
