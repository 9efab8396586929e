"""The per-process store of where each caller's latest write left the primary's WAL (used with
RATELIMIT_STORAGE_URI=memory://; the Redis one is exercised by tests/test_read_replicas.py)."""

import asyncio

from shopapi.pipeline import write_marks
from shopapi.pipeline.write_marks import MemoryMarks


def test_a_mark_keeps_the_highest_position_until_it_expires(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(write_marks.time, "monotonic", lambda: now[0])
    marks = MemoryMarks(keep_seconds=5)

    async def scenario():
        assert await marks.written_at("sub:a") is None
        await marks.note("sub:a", 200)
        await marks.note("sub:a", 100)  # a slower request's earlier write, noted last
        assert await marks.written_at("sub:a") == 200
        assert await marks.written_at("sub:b") is None
        now[0] += 5.5
        assert await marks.written_at("sub:a") is None

    asyncio.run(scenario())


def test_the_store_stays_bounded(monkeypatch):
    monkeypatch.setattr(write_marks, "MAX_CALLERS_KNOWN", 10)
    marks = MemoryMarks(keep_seconds=60)

    async def scenario():
        for n in range(25):
            await marks.note(f"sub:{n}", n)
        assert len(marks._marks) <= 10
        assert await marks.written_at("sub:24") == 24  # the latest writer is remembered

    asyncio.run(scenario())
