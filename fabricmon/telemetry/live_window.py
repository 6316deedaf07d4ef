"""The live window: the last N seconds of frames per fabric, in Redis.

Layout (all keys prefixed ``fm:``):

- ``fm:frames:{fabric}`` — a Redis *stream*; each entry has one field ``f`` holding an encoded
  :class:`~fabricmon.core.telemetry.frames.Frame`. Trimmed to about the window length. Stream IDs let a live
  consumer ``XREAD BLOCK`` for the next frame and resume after a reconnect from the last ID it saw.
- ``fm:health:{fabric}`` — a hash, switch name → JSON health (``up``, ``last_success_ns``,
  ``poll_ms``, ``errors``, ``error_counts``, ``last_error``).

Redis connections come from :func:`connect` so tests and the demo can point at any server.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from fabricmon.core.telemetry.frames import Frame

FIELD = b"f"


def frames_key(fabric: str) -> str:
    return f"fm:frames:{fabric}"


def health_key(fabric: str) -> str:
    return f"fm:health:{fabric}"


def connect(url: str | None = None) -> redis.Redis:
    if url is None:
        from django.conf import settings

        url = settings.REDIS_URL
    return redis.Redis.from_url(url)


def append(r: redis.Redis, frame: Frame, *, max_frames: int) -> bytes:
    """Add a frame to its fabric's window; returns the stream ID."""
    return r.xadd(frames_key(frame.fabric), {FIELD: frame.encode()}, maxlen=max_frames, approximate=True)


def read_window(r: redis.Redis, fabric: str, *, after_id: bytes | str = b"-", count: int | None = None) -> list[tuple[bytes, Frame]]:
    """Frames after ``after_id`` (exclusive unless ``-``), oldest first."""
    start = after_id if after_id in (b"-", "-") else b"(" + (after_id if isinstance(after_id, bytes) else after_id.encode())
    return [(eid, Frame.decode(fields[FIELD])) for eid, fields in r.xrange(frames_key(fabric), min=start, count=count)]


def latest(r: redis.Redis, fabric: str) -> tuple[bytes, Frame] | None:
    entries = r.xrevrange(frames_key(fabric), count=1)
    if not entries:
        return None
    eid, fields = entries[0]
    return eid, Frame.decode(fields[FIELD])


def write_health(r: redis.Redis, fabric: str, switch: str, health: dict[str, Any]) -> None:
    r.hset(health_key(fabric), switch, json.dumps(health, separators=(",", ":")))


def read_health(r: redis.Redis, fabric: str) -> dict[str, dict[str, Any]]:
    return {k.decode(): json.loads(v) for k, v in r.hgetall(health_key(fabric)).items()}
