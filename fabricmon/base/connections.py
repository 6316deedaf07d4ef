"""Redis connections from the settings, sync and async (one place that reads ``REDIS_URL``)."""

from __future__ import annotations

import redis
import redis.asyncio as aioredis


def _url(url: str | None) -> str:
    if url is not None:
        return url
    from django.conf import settings  # noqa: PLC0415  (callers outside Django pass the URL)

    return str(settings.REDIS_URL)


def connect(url: str | None = None, **options: float) -> redis.Redis:
    """A client of ``url`` (default: ``settings.REDIS_URL``); ``options`` as redis-py takes them
    (e.g. ``socket_timeout``)."""
    return redis.Redis.from_url(_url(url), **options)


def connect_async(url: str | None = None) -> aioredis.Redis:
    """An asyncio client for sockets; its read timeout outlasts ``XREAD BLOCK``, or an idle fabric
    would look like a dead Redis."""
    return aioredis.Redis.from_url(_url(url), socket_timeout=30, socket_connect_timeout=5)
