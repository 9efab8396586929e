"""What grows in a worker's heap under load (bench/soak.py's SOAK_HEAP=1): a single production
worker traced with tracemalloc (bench/heap_conf.py), snapshots on request, and the
allocation sites that grew most between the first snapshot and the last."""

import os
import pathlib
import tempfile
import time
import tracemalloc

from bench import load

TOP = 15


def traced_server(port: int, secrets_env: dict, log_dir: pathlib.Path) -> load.Server:
    """One worker of the production server, its heap traced."""
    heap_dir = log_dir / "heap"
    heap_dir.mkdir()
    env = {
        **os.environ,
        **secrets_env,
        "BIND": f"127.0.0.1:{port}",
        "WEB_CONCURRENCY": "1",
        "DATABASE_URL": load.URL,
        "SHARED_STORE_URL": load.REDIS,
        "PROMETHEUS_MULTIPROC_DIR": tempfile.mkdtemp(prefix="traced-metrics-", dir=log_dir),
        "SOAK_HEAP_DIR": str(heap_dir),
    }
    env.pop("RATE_LIMIT_SCALE", None)
    argv = [str(load.BIN / "gunicorn"), "-c", "bench/heap_conf.py", "app:create_app()"]
    return load.Server("traced", argv, env, port, log_dir)


def snapshot(server: load.Server, log_dir: pathlib.Path, number: int) -> None:
    """Ask the traced worker for a snapshot of its heap, and wait until it is written."""
    wanted = log_dir / "heap" / f"{number:04d}.want"
    wanted.touch()
    deadline = time.monotonic() + 300
    while wanted.exists():
        if time.monotonic() > deadline or server.process.poll() is not None:
            raise SystemExit("the traced worker wrote no heap snapshot")
        time.sleep(0.2)


def growth(log_dir: pathlib.Path) -> list[str]:
    """The allocation sites that grew most, first snapshot to last, as a markdown table."""
    snapshots = sorted((log_dir / "heap").glob("*.snapshot"))
    if len(snapshots) < 2:
        return []
    ignore = [tracemalloc.Filter(False, tracemalloc.__file__)]
    first, last = (tracemalloc.Snapshot.load(str(path)) for path in (snapshots[0], snapshots[-1]))
    first, last = first.filter_traces(ignore), last.filter_traces(ignore)
    total = sum(stat.size for stat in last.statistics("filename")) - sum(
        stat.size for stat in first.statistics("filename")
    )
    lines = [
        f"Traced heap: {total / 2**20:+.2f} MiB between snapshot {snapshots[0].stem} and "
        f"{snapshots[-1].stem}.",
        "",
        "| grew KiB | blocks | allocated at (innermost frame first) |",
        "|---|---|---|",
    ]
    for stat in last.compare_to(first, "traceback")[:TOP]:
        frames = " ← ".join(
            f"{_short(frame.filename)}:{frame.lineno}" for frame in reversed(stat.traceback[-4:])
        )
        lines.append(f"| {stat.size_diff / 1024:+.0f} | {stat.count_diff:+,} | {frames} |")
    return lines


def _short(filename: str) -> str:
    """A frame's file relative to the repository, or to the installed packages."""
    if filename.startswith(str(load.ROOT) + "/") and "/site-packages/" not in filename:
        return filename.removeprefix(str(load.ROOT) + "/")
    for marker in ("site-packages/", "/lib/python"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename
