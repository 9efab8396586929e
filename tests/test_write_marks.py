"""Where each caller's latest write left the primary's WAL: the per-process store (used with
SHARED_STORE_URL=memory://), and the Redis one through an outage (the Redis one in use is
exercised by tests/test_read_replicas.py)."""

import asyncio
import logging
import os
import time
import uuid

import httpx
import pytest
import redis
from prometheus_client import REGISTRY
from support.helpers import WAIT_SECONDS
from support.tcp_proxy import TcpProxy

from shopapi.pipeline import write_marks
from shopapi.pipeline.write_marks import MemoryMarks, RedisMarks


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


def test_a_redis_outage_is_one_warning_and_reads_trust_no_mark_until_writes_could_replay(
    monkeypatch, caplog
):
    """Every write notes its mark: during an outage, one warning and one outage counted, not one
    a write; once Redis answers, the marks lack what was written meanwhile, so reads go to the
    primary for as long as a mark is kept."""
    url = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    parts = httpx.URL(url)
    try:
        redis.Redis.from_url(url, socket_connect_timeout=1).ping()
    except redis.RedisError as error:
        if os.environ.get("CI"):
            pytest.fail(f"Redis unreachable at {url} ({error})")
        pytest.skip(f"Redis unreachable at {url} ({error})")
    monkeypatch.setattr(write_marks, "RETRY_STORAGE_AFTER", 0)  # every write tries Redis
    proxy = TcpProxy(parts.host, parts.port or 6379)
    proxy.start()
    caller = f"sub:{uuid.uuid4().hex}"

    def outages() -> float:
        value = REGISTRY.get_sample_value("store_outages_total", {"store": "write marks' Redis"})
        return value or 0.0

    async def scenario():
        marks = RedisMarks(f"redis://127.0.0.1:{proxy.port}{parts.path}", keep_seconds=0.5)
        # Another process, which only reads: it learns of the outage, not of the writes.
        reader = RedisMarks(f"redis://127.0.0.1:{proxy.port}{parts.path}", keep_seconds=0.5)
        await marks.note(caller, 1)
        assert await marks.written_at(caller) == 1
        assert await reader.written_at(caller) == 1
        before = outages()
        proxy.stop()
        with pytest.raises(write_marks.MarksUnavailable):
            await reader.written_at(caller)
        for position in range(2, 52):
            await marks.note(caller, position)
        assert outages() == before + 2  # one per process
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 2  # one a process, not one a write
        assert all("write marks' Redis unavailable" in w.message for w in warnings)
        proxy.start()
        with pytest.raises(write_marks.MarksUnavailable):  # those 50 writes were noted nowhere
            await marks.written_at(caller)
        # Redis answers the reader again, but lacks what was written meanwhile: not trusted.
        with pytest.raises(write_marks.MarksUnavailable):
            await reader.written_at(caller)
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            await marks.note(caller, 60)
            try:
                if await marks.written_at(caller) == 60:
                    break
            except write_marks.MarksUnavailable:
                pass
            assert time.monotonic() < deadline, "the marks are never trusted again"
            await asyncio.sleep(0.05)
        await marks.redis.aclose()
        await reader.redis.aclose()

    caplog.set_level(logging.INFO, logger="shopapi.stores")
    try:
        asyncio.run(scenario())
    finally:
        proxy.stop()
    assert any("answers again" in r.message for r in caplog.records)
