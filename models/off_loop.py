"""The pipeline's own database work (API-key lookups, revocation refreshes, Idempotency-Key
claims) runs off the event loop on at most THREADS threads at once: with Flask's threads and the
event stream's, every thread that may hold a pooled connection is counted, and app.py sizes the
pool to them all, so that no thread waits for a connection. Design: docs/pipeline.md."""

import asyncio
import weakref

import anyio.to_thread

THREADS = 2

# One limiter per event loop (a server process has one; the tests' clients each their own).
_limiters: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


async def run(function, *args):
    """`function(*args)` on one of the pipeline's threads, once one is free."""
    loop = asyncio.get_running_loop()
    limiter = _limiters.get(loop)
    if limiter is None:
        limiter = _limiters[loop] = anyio.CapacityLimiter(THREADS)
    return await anyio.to_thread.run_sync(function, *args, limiter=limiter)
