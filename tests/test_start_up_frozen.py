"""What a server process built as it started is out of the cyclic collector's sight once it
serves (shopapi/pipeline/http_server.py): a full collection then walks only what serving made,
where it walked the contracts, their validators and the app again each time and held the worker
for a hundred milliseconds and more."""

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
    body = json.dumps({"walked": [item[0] for item in built if id(item) in walked]})
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body.encode()})

uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), http=HttpProtocol, lifespan="on",
            log_level="warning")
"""


def test_what_start_up_built_is_not_walked_by_the_collector_while_serving():
    port = free_port()
    process = subprocess.Popen([sys.executable, "-c", _SERVER, str(port)], cwd=ROOT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(base, process)
        assert httpx.get(base, timeout=60).json() == {"walked": []}
    finally:
        process.terminate()
        process.wait(timeout=60)
