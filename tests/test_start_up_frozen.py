"""What a server process built as it started is out of the cyclic collector's sight once it
serves (shopapi/pipeline/http_server.py): a full collection then walks only what serving made,
where it walked the contracts, their validators and the app again each time and held the worker
for a hundred milliseconds and more. And a request keeping thousands of objects alive while it
runs is not interrupted by collections that walk them, only to find them alive."""

import subprocess
import sys

import httpx
import pytest
from support.live import ROOT, wait_until_up

from shopapi.testing.ports import free_port

pytestmark = pytest.mark.slow

# An app served with the production protocol, answering whether what it built at start-up (and
# in its lifespan's start-up) is still among the objects the collector walks.
_SERVER = """
import gc, json, sys
import uvicorn
from shopapi.pipeline.http_server import HttpProtocol

# Lists, which the collector always tracks (a dict of strings it leaves alone).
built = [["import"] for _ in range(1000)]

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        await receive()
        built.append(["lifespan"])
        await send({"type": "lifespan.startup.complete"})
        await receive()
        await send({"type": "lifespan.shutdown.complete"})
        return
    walked = {id(o) for o in gc.get_objects()}
    before = sum(generation["collections"] for generation in gc.get_stats())
    held = [[n] for n in range(5000)]  # what a request keeps alive while it runs
    collected = sum(generation["collections"] for generation in gc.get_stats()) - before
    body = json.dumps({"walked": [item[0] for item in built if id(item) in walked],
                       "collections while it ran": collected, "held": len(held)})
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body.encode()})

uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), http=HttpProtocol, lifespan="on",
            log_level="warning")
"""


def test_the_collector_walks_neither_what_start_up_built_nor_a_request_while_it_runs():
    port = free_port()
    process = subprocess.Popen([sys.executable, "-c", _SERVER, str(port)], cwd=ROOT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(base, process)
        answer = httpx.get(base, timeout=60).json()
        assert answer == {"walked": [], "collections while it ran": 0, "held": 5000}
    finally:
        process.terminate()
        process.wait(timeout=60)
