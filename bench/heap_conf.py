"""The production server's configuration (ops/gunicorn.conf.py) with the worker's heap traced:
tracemalloc from the moment the worker starts serving, and a snapshot written whenever a file
named `<n>.want` appears in SOAK_HEAP_DIR (bench/soak.py's SOAK_HEAP=1 asks once a minute)."""

import pathlib
import runpy
import threading
import time
import tracemalloc

globals().update(
    {
        name: value
        for name, value in runpy.run_path(
            str(pathlib.Path(__file__).resolve().parent.parent / "ops" / "gunicorn.conf.py")
        ).items()
        if not name.startswith("__")
    }
)

FRAMES = 8  # deep enough to name the caller of a dict's growth, shallow enough to keep up


def post_worker_init(worker):
    import os

    directory = pathlib.Path(os.environ["SOAK_HEAP_DIR"])
    tracemalloc.start(FRAMES)

    def snapshot_on_request():
        while True:
            for wanted in directory.glob("*.want"):
                snapshot = tracemalloc.take_snapshot()
                snapshot.dump(str(wanted.with_suffix(".snapshot.tmp")))
                wanted.with_suffix(".snapshot.tmp").rename(wanted.with_suffix(".snapshot"))
                wanted.unlink()
            time.sleep(0.5)

    threading.Thread(target=snapshot_on_request, name="heap-snapshots", daemon=True).start()
