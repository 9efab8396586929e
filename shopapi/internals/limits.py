"""The limits engine's Redis storage (redis-py, asyncio) driven one step past its API, each use
held by tests/test_internals.py (TestLimits): a limit's hit or its count, sent in one round trip
with a read of another key of the same Redis, so that a read's rate limit and its caller's write
mark (shopapi/pipeline/write_marks.py) cost one call, not two.

The hit is the engine's own: its Lua script (`incr_expire.lua`), on its own connection, under its
own key prefix, so that every other call of the engine sees the same count."""

from limits.aio.storage import RedisStorage
from limits.aio.storage.redis.bridge import RedisBridge
from limits.aio.storage.redis.redispy import RedispyBridge
from limits.errors import StorageError


async def hit_and_get(storage: RedisStorage, key: str, expiry: int, other_key: str):
    """One hit of the limit at `key` (as `storage.incr(key, expiry)` counts it), and the value
    of `other_key` (bytes, or None), in one round trip: (the count, that value)."""
    bridge = storage.bridge
    # EVAL rather than EVALSHA: Redis caches the script by its digest either way, and a pipeline
    # of redis-py's asks SCRIPT EXISTS first for a script object it is given, a round trip more.
    incr = (bridge.SCRIPT_INCR_EXPIRE, 1, bridge.prefixed_key(key), expiry, 1)
    count, value = await _pipelined(storage, ("EVAL", *incr), ("GET", other_key))
    return int(count), value


async def count_and_get(storage: RedisStorage, key: str, other_key: str):
    """The count of the limit at `key` (as `storage.get(key)` reads it) and the value of
    `other_key`, in one round trip: (the count, that value)."""
    count, value = await _pipelined(
        storage, ("GET", storage.bridge.prefixed_key(key)), ("GET", other_key)
    )
    return int(count or 0), value


async def _pipelined(storage: RedisStorage, *commands: tuple) -> list:
    """Each command's answer, sent together on the storage's connection; StorageError as the
    engine raises it (wrap_exceptions) when Redis fails."""
    try:
        async with storage.bridge.get_connection().pipeline(transaction=False) as pipeline:
            for command in commands:
                pipeline.execute_command(*command)
            return await pipeline.execute()
    except storage.base_exceptions as error:
        raise StorageError(error) from error


# What the above relies on of limits' insides, checked against the installed release by
# tests/test_internals.py: (owner, name, the parameters it takes, or None for an attribute).
RELIED_UPON = [
    (RedisStorage, "bridge", None),
    (RedisStorage, "base_exceptions", None),
    (RedisBridge, "SCRIPT_INCR_EXPIRE", None),
    (RedisBridge, "prefixed_key", ["self", "key"]),
    (RedispyBridge, "get_connection", ["self", "readonly"]),
]
