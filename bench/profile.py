"""Where a worker's CPU goes under the load mix (`make profile`): py-spy samples one production
worker while wrk drives the mix, and the samples are sorted into the layers a request crosses.
Writes bench/results/profile.md (the breakdown) and profile.txt (the collapsed stacks, which
speedscope or flamegraph.pl draw).

Only samples where the thread holds the GIL are taken (`--gil`): Python's CPU, not its waits.
What runs without the GIL (the kernel's side of sockets, libpq) is not in it; bench/load.py's
/proc numbers are the whole CPU.

    BENCH_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/shopapi_bench python bench/profile.py

PROFILE_MIX names another of bench/mix.lua's mixes (`conditional`: the list revalidated, every
answer a 304; `list_v3`, ...), and the report is then profile-<mix>.md.
"""

import collections
import os
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import cpu, load  # noqa: E402
from bench.seed import URL, reset, seed  # noqa: E402

SECONDS, RATE_HZ = 15, 250
MIX = os.environ.get("PROFILE_MIX", "mix")
# A sample belongs to the first layer, from its innermost frame outwards, whose pattern matches
# a frame ("function (file:line)").
LAYERS = (
    ("JWT verification", r"jose/|AccessTokens"),
    ("parameter validation", r"validators/parameter|contract/validation|uri_parsing|jsonschema"),
    ("body validation", r"validators/json|RequestBodyValidator"),
    ("rate limits (Redis)", r"redis/|limits/|LimitCounter"),
    ("request log", r"logging/|shopapi/telemetry/logs"),
    ("metrics", r"prometheus_client|ObservabilityMiddleware._record"),
    ("JSON", r"orjson|jsonifier|json/"),
    ("Peewee: building SQL", r"(__sql__|Context\.|_sql|Node|ColumnBase|Expression).*peewee"),
    ("Peewee: rows to objects",
     r"(process_row|CursorWrapper|iterate|python_value|Model.__init__|fill_cache).*peewee"),
    ("Peewee: pool", r"playhouse/pool|Database.connect|Database.close|close_connection"),
    ("Peewee: the rest (executing, transactions)", r"peewee|psycopg"),
    ("representations", r"shopapi/web/representations|shopapi/web/money|represent \(handlers"),
    ("handlers and list language", r"handlers/|web/listing|web/cursors|shopapi/events/"),
    ("WSGI bridge", r"shopapi/pipeline/wsgi_bridge|a2wsgi/|concurrent/futures|threading.py"),
    ("Flask and Werkzeug", r"flask/|werkzeug/"),
    ("Connexion (routing, security, decorators)", r"connexion/"),
    ("Starlette", r"starlette/"),
    ("our ASGI middleware", r"shopapi/"),
    ("uvicorn and httptools", r"uvicorn|httptools"),
    ("asyncio event loop", r"asyncio/|uvloop"),
)  # fmt: skip


def breakdown(stacks: pathlib.Path) -> tuple[int, collections.Counter, collections.Counter]:
    """(samples, samples per layer, samples per innermost function) of py-spy's raw output."""
    layers, functions, total = collections.Counter(), collections.Counter(), 0
    for line in stacks.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames, count = stack.split(";"), int(count)
        total += count
        functions[re.sub(r":\d+\)$", ")", frames[-1])] += count
        layers[_layer(frames)] += count
    return total, layers, functions


def _layer(frames: list[str]) -> str:
    for frame in reversed(frames):
        for name, pattern in LAYERS:
            if re.search(pattern, frame):
                return name
    return "other"


def main() -> None:
    seed(URL)
    reset(URL)
    secrets_env, tokens = load.server_secrets()
    name = "profile" if MIX == "mix" else f"profile-{MIX}"
    stacks = load.RESULTS / f"{name}.txt"
    with tempfile.TemporaryDirectory(prefix="shopapi-profile-") as scratch:
        scratch = pathlib.Path(scratch)
        data = scratch / "clients.lua"
        load.write_clients(data, tokens)
        server = load.shopapi_server("profiled", load.SHOPAPI_PORT, 1, secrets_env, scratch)
        try:
            if MIX == "conditional":
                load.write_revalidations(data, server, tokens)
            load.wrk([server], data, MIX, load.WARM_UP_SECONDS)
            (worker,) = cpu.children(server.process.pid)
            spy = subprocess.Popen(  # noqa: S603 (py-spy, our arguments)
                [load.BIN / "py-spy", "record", "--gil", "-r", str(RATE_HZ), "-d", str(SECONDS),
                 "-f", "raw", "-o", str(stacks), "-p", str(worker)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            run = load.wrk([server], data, MIX, SECONDS)
            spy.wait()
        finally:
            server.stop()
    total, layers, functions = breakdown(stacks)
    lines = [
        f"# Where a worker's CPU goes under `{MIX}`",
        "",
        f"py-spy, {RATE_HZ} Hz, {SECONDS} s, one production worker (all features on) under "
        f"`{MIX}` at {run['throughput']:.0f} req/s, {run['app_cpu_ms']:.2f} CPU-ms/request "
        f"(/proc); {total:,} samples holding the GIL. Collapsed stacks: {stacks.name}.",
        "",
        "| layer | share of the samples |",
        "|---|---|",
        *(f"| {name} | {100 * count / total:.1f} % |" for name, count in layers.most_common()),
        "",
        "Functions with the most samples of their own:",
        "",
        "| function | share |",
        "|---|---|",
        *(f"| `{name}` | {100 * n / total:.1f} % |" for name, n in functions.most_common(20)),
        "",
    ]
    report = "\n".join(lines)
    (load.RESULTS / f"{name}.md").write_text(report)
    print(report)


if __name__ == "__main__":
    os.chdir(ROOT)
    main()
