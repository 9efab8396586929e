"""`make reset` empties the demo database only while no server answers on HOST:PORT: a server
going on after its database was made anew refuses fresh tokens as revoked."""

import os
import subprocess
import urllib.parse

import pytest
from support.live import ROOT, live_server

pytestmark = pytest.mark.slow


def test_make_reset_refuses_while_a_server_answers(database_url, tmp_path):
    demo_database = tmp_path / "shopapi.db"  # stands for data/shopapi.db: left alone, or not
    demo_database.write_bytes(b"the demo database")
    environment = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "SEED_DEMO")}
    with live_server(database_url) as base:
        address = urllib.parse.urlsplit(base)
        reset = subprocess.run(
            [
                "make",
                "--no-print-directory",
                "reset",
                f"HOST={address.hostname}",
                f"PORT={address.port}",
                f"DEMO_DATABASE={demo_database}",
            ],
            cwd=ROOT,
            env=environment,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert reset.returncode != 0, reset.stdout + reset.stderr
    assert f"a server answers on {address.hostname}:{address.port}" in reset.stdout
    assert demo_database.read_bytes() == b"the demo database"
