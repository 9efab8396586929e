"""Each server process's database round trip, shared through SHARED_STORE_URL's Redis, so that a
host compares its own with the others' (models/round_trip.py): a hash per database, a field per
process."""

import time
import uuid

import redis
import redis.exceptions

from shopapi.telemetry.outages import Outages

KEY = "shopapi:database-round-trips"
# A peer's figure older than this is a process gone; one much older is deleted.
FRESH_SECONDS = 10
FORGOTTEN_SECONDS = 60


class PeerRoundTrips:
    def __init__(self, url: str, database: str):
        """Peers are the processes using `database` (its name) through the Redis at `url`."""
        self.key = f"{KEY}:{database}"
        # The limits engine's redis+unix:// is redis-py's unix://.
        self.redis = redis.Redis.from_url(
            url.replace("redis+unix://", "unix://", 1),
            socket_timeout=0.5,
            socket_connect_timeout=0.5,
        )
        self.me = uuid.uuid4().hex
        self.outages = Outages("round trips' Redis", "no host leaves rotation", 5)

    def __call__(self, own_seconds: float) -> float | None:
        """Share `own_seconds`; the fastest fresh peer's round trip, None if none."""
        if self.outages.pausing:
            return None
        now = time.time()
        try:
            with self.redis.pipeline(transaction=False) as pipe:
                pipe.hset(self.key, self.me, f"{own_seconds}:{now}")
                pipe.expire(self.key, FORGOTTEN_SECONDS)
                pipe.hgetall(self.key)
                figures = pipe.execute()[-1]
            self.outages.answered()
        except redis.exceptions.RedisError as error:
            self.outages.failed(error)
            return None
        fastest, forgotten = None, []
        for field, value in figures.items():
            seconds, _, at = value.decode().partition(":")
            if float(at) < now - FORGOTTEN_SECONDS:
                forgotten.append(field)
            elif field.decode() != self.me and float(at) >= now - FRESH_SECONDS:
                fastest = min(float(seconds), fastest if fastest is not None else float("inf"))
        if forgotten:
            try:
                self.redis.hdel(self.key, *forgotten)
            except redis.exceptions.RedisError as error:
                self.outages.failed(error)
        return fastest
