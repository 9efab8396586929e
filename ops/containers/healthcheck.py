"""The image's HEALTHCHECK: exit 0 when the server on $PORT answers /healthz with 200, else 1.
Python's standard library only (the image has no curl)."""

import os
import sys
import urllib.request

try:
    port = int(os.environ.get("PORT", "8000"))
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=3) as response:
        sys.exit(0 if response.status == 200 else 1)
except (OSError, ValueError):
    sys.exit(1)
