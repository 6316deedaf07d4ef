"""Per-token rate limit of the ingest API: a token bucket per API token in Redis.

Each request takes one token from its API token's bucket, which holds at most
``FABRICMON_INGEST_BURST`` and refills at ``FABRICMON_INGEST_RATE_PER_S`` (0 turns the limit off).
One Lua script reads, refills and takes atomically on Redis's clock, so every web process and
server shares one bucket per token. When Redis cannot be reached the request is let through (and
logged): ingest must not stop because the limiter's store is down.
"""

from __future__ import annotations

import logging
import time
from functools import lru_cache
from typing import Any

import redis
from django.conf import settings

from fabricmon.base import keys

log = logging.getLogger(__name__)


_TAKE = """
local rate, burst, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens, ts = tonumber(state[1]), tonumber(state[2])
if tokens == nil or ts == nil then tokens, ts = burst, now end
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate)
local wait = 0
if tokens >= cost then tokens = tokens - cost else wait = (cost - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil((burst / rate) * 1000) + 1000)
return tostring(wait)
"""


def limits() -> tuple[float, int]:
    """(requests per second, burst) per token; a rate of 0 means no limit."""
    return float(settings.FABRICMON_INGEST_RATE_PER_S), int(settings.FABRICMON_INGEST_BURST)


@lru_cache(maxsize=4)
def _script(url: str) -> Any:
    client = redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
    return client.register_script(_TAKE)


_last_warning = 0.0


def take(token_key: str, cost: int = 1) -> float:
    """Take ``cost`` from the bucket of ``token_key`` (the token's random prefix and row id, so two
    databases sharing a Redis never share a bucket): 0.0 if allowed, else the seconds until it
    would be."""
    rate, burst = limits()
    if rate <= 0:
        return 0.0
    try:
        take_script = _script(settings.REDIS_URL)
        wait = float(take_script(keys=[keys.rate_bucket(token_key)], args=[rate, burst, cost]))
    except redis.RedisError as exc:
        global _last_warning  # noqa: PLW0603  (one warning a minute, not one per request)
        if time.monotonic() - _last_warning > 60:
            _last_warning = time.monotonic()
            log.warning("ingest rate limit not applied: Redis unreachable (%s)", exc)
        return 0.0
    return wait
