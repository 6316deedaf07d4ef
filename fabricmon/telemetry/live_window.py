"""The live window: the last N seconds of frames per fabric, in Redis — its one reader and writer.

Layout (keys spelled in ``fabricmon.base.keys``):

- ``fm:frames:{fabric}`` — a Redis *stream*; each entry has one field ``f`` holding an encoded
  :class:`~fabricmon.core.telemetry.frames.Frame`. Trimmed to about the window length. Stream IDs
  let a live consumer ``XREAD BLOCK`` for the next frame and resume after a reconnect from the last
  ID it saw.
- ``fm:health:{fabric}`` — a hash, switch name → JSON health (``up``, ``last_success_ns``,
  ``poll_ms``, ``errors``, ``error_counts``, ``last_error``).

Every other module reads and writes these through the functions here: sync ones for collectors,
framing, history, alerts and the phase views; ``async_*`` ones for the WebSocket consumers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import redis
import redis.asyncio as aioredis

from fabricmon.base import keys
from fabricmon.base.connections import connect
from fabricmon.core.telemetry.frames import Frame, FrameFormatError

FIELD = b"f"
Entry = tuple[bytes, Frame]  # (stream id, frame)

__all__ = ["FIELD", "append", "connect", "fabrics", "frames_after", "latest", "length", "newest_id",
           "port_window", "read_health", "read_window", "write_health"]


def _decode(entries: list[tuple[bytes, dict[bytes, bytes]]]) -> list[Entry]:
    return [(eid, Frame.decode(fields[FIELD])) for eid, fields in entries]


def _after(after_id: bytes | str) -> bytes | str:
    """XRANGE's exclusive start after ``after_id`` (``-``: from the first entry)."""
    if after_id in (b"-", "-"):
        return after_id
    return b"(" + (after_id if isinstance(after_id, bytes) else after_id.encode())


# --- sync ---------------------------------------------------------------------------------------


def append(r: redis.Redis, frame: Frame, *, max_frames: int) -> bytes:
    """Add a frame to its fabric's window; returns the stream ID."""
    eid: bytes = r.xadd(keys.frames(frame.fabric), {FIELD: frame.encode()}, maxlen=max_frames,
                        approximate=True)
    return eid


def read_window(
    r: redis.Redis, fabric: str, *, after_id: bytes | str = b"-", count: int | None = None
) -> list[Entry]:
    """Frames after ``after_id`` (exclusive unless ``-``), oldest first."""
    return _decode(r.xrange(keys.frames(fabric), min=_after(after_id), count=count))


# One port's values out of each frame, cut in Redis: a port page needs 4 bytes a metric a frame,
# not the whole window (600 frames of 16,896 ports are ~480 MB; the 16k-port bench's port JSON
# answered in 16.8 s). Frame's wire form (core/telemetry/frames.py): b"FMF1", u32 header length,
# JSON header (n ports, metric names), then each metric's n float32s back to back.
_PORT_CUT = """
local entries = redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', ARGV[3])
local pos = tonumber(ARGV[2])
local out = {}
for _, e in ipairs(entries) do
  local fields, blob = e[2], nil
  for j = 1, #fields, 2 do
    if fields[j] == 'f' then blob = fields[j + 1] end
  end
  if blob and string.sub(blob, 1, 4) == 'FMF1' and #blob >= 8 then
    local hlen = struct.unpack('<I4', blob, 5)
    local header = string.sub(blob, 9, 8 + hlen)
    local ok, h = pcall(cjson.decode, header)
    local vals = {}
    if ok and type(h) == 'table' and type(h['n']) == 'number' and pos < h['n'] then
      local n = h['n']
      for k = 1, #h['metrics'] do
        local at = 8 + hlen + 4 * ((k - 1) * n + pos)
        vals[k] = string.sub(blob, at + 1, at + 4)
      end
    end
    out[#out + 1] = {e[1], header, table.concat(vals)}
  else
    out[#out + 1] = {e[1], '', ''}
  end
end
return out
"""
PORT_CUT_CHUNK = 32  # entries a script call reads: Redis copies ≤ 32 frames into Lua at a time


PortSample = tuple[dict[str, Any], dict[str, float]]  # (frame header, metric → the port's value)


def port_window(r: redis.Redis, fabric: str, position: int, since_ms: int = 0) -> list[PortSample]:
    """One port's values in every frame appended at or after ``since_ms``, oldest first: (the
    frame's header — ``ts_ns``, ``topo``, ``interval_s``, ``n`` — and metric → value; empty for a
    frame that has no such port). Unreadable entries are skipped. Read in chunks of
    ``PORT_CUT_CHUNK`` entries, each cut down to 4 bytes a metric inside Redis."""
    cut = r.register_script(_PORT_CUT)
    out: list[PortSample] = []
    start: bytes | str = f"{max(since_ms, 0)}-0"
    while True:
        rows = cut(keys=[keys.frames(fabric)], args=[start, position, PORT_CUT_CHUNK])
        for _eid, header, values in rows:
            try:
                h = json.loads(header)
                names = list(h["metrics"])
            except (ValueError, KeyError, TypeError):
                continue
            got = np.frombuffer(values, dtype="<f4") if len(values) == 4 * len(names) else ()
            out.append((h, {m: float(v) for m, v in zip(names, got, strict=False)}))
        if len(rows) < PORT_CUT_CHUNK:
            return out
        start = b"(" + bytes(rows[-1][0])


# How far before a frame's own time its stream ID (Redis' clock when it was appended) may be: a
# frame is appended after the interval it describes ends, so only a Redis clock behind the
# framer's by more than this could hide one from ``frames_after``.
APPEND_SLACK_S = 60.0


def frames_after(r: redis.Redis, fabric: str, ts_ns: int, count: int) -> list[Frame]:
    """Frames with ``ts_ns`` after the given one, oldest first, out of at most ``count`` stream
    entries read (unreadable ones skipped): read from the stream IDs near that time on, not the
    whole window — the minute's history row read all 600 frames (~480 MB at 16,896 ports) to
    keep the last 60."""
    start_ms = max(ts_ns // 1_000_000 - int(APPEND_SLACK_S * 1000), 0)
    out = []
    for _eid, fields in r.xrange(keys.frames(fabric), min=f"{start_ms}-0", max="+", count=count):
        try:
            frame = Frame.decode(bytes(fields[FIELD]))
        except (FrameFormatError, KeyError, TypeError):
            continue
        if frame.ts_ns > ts_ns:
            out.append(frame)
    return out


def latest(r: redis.Redis, fabric: str) -> Entry | None:
    entries = _decode(r.xrevrange(keys.frames(fabric), count=1))
    return entries[0] if entries else None


def newest_id(r: redis.Redis, fabric: str) -> bytes | None:
    """The stream ID of the newest frame (None: no window), without decoding it."""
    entries = r.xrevrange(keys.frames(fabric), count=1)
    return entries[0][0] if entries else None


def length(r: redis.Redis, fabric: str) -> int:
    """How many frames the window holds now."""
    return int(r.xlen(keys.frames(fabric)))


def fabrics(r: redis.Redis) -> list[str]:
    """Fabrics that have frames in the live window, by name."""
    return sorted(keys.fabric_of_frames(k) for k in r.scan_iter(match=keys.FRAMES_PATTERN, count=500))


def forget(r: redis.Redis, fabric: str) -> None:
    """Drop the fabric's window and health (a new cluster under the same name)."""
    r.delete(keys.frames(fabric), keys.health(fabric))


def write_health(r: redis.Redis, fabric: str, switch: str, health: dict[str, Any]) -> None:
    write_healths(r, fabric, {switch: health})


def write_healths(r: Any, fabric: str, healths: Mapping[str, dict[str, Any]]) -> None:
    """Several switches' health in one HSET (``r``: a client or a pipeline)."""
    if healths:
        encoded = {s: json.dumps(h, separators=(",", ":")) for s, h in healths.items()}
        r.hset(keys.health(fabric), mapping=encoded)


def read_health(r: redis.Redis, fabric: str) -> dict[str, dict[str, Any]]:
    return {k.decode(): json.loads(v) for k, v in r.hgetall(keys.health(fabric)).items()}


# --- async (WebSocket consumers) --------------------------------------------------------------


# One metric of every port out of each frame, cut in Redis: a heatmap's opening window needs one
# metric, not the frames' eleven (300 whole frames of 16,896 ports were ~220 MB in the web process
# at every WebSocket connect). Same wire form as ``_PORT_CUT`` reads.
_METRIC_CUT = """
local entries = redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', ARGV[3])
local out = {}
for _, e in ipairs(entries) do
  local fields, blob = e[2], nil
  for j = 1, #fields, 2 do
    if fields[j] == 'f' then blob = fields[j + 1] end
  end
  local header, cut = '', ''
  if blob and string.sub(blob, 1, 4) == 'FMF1' and #blob >= 8 then
    local hlen = struct.unpack('<I4', blob, 5)
    header = string.sub(blob, 9, 8 + hlen)
    local ok, h = pcall(cjson.decode, header)
    if ok and type(h) == 'table' and type(h['n']) == 'number' and type(h['metrics']) == 'table' then
      for k = 1, #h['metrics'] do
        if h['metrics'][k] == ARGV[2] then
          local at = 8 + hlen + 4 * (k - 1) * h['n']
          cut = string.sub(blob, at + 1, at + 4 * h['n'])
        end
      end
    end
  end
  out[#out + 1] = {e[1], header, cut}
end
return out
"""


@dataclass(frozen=True)
class MetricCut:
    """A frame as ``async_metric_since`` reads it: its time, layout and one metric."""

    eid: bytes
    frame: Frame  # metrics: {metric: values}, or {} where the frame has no such metric
    n_ports: int
    metrics: tuple[str, ...]  # every metric the whole frame holds


async def async_metric_since(r: aioredis.Redis, fabric: str, since_ms: int, metric: str) -> list[MetricCut]:
    """Frames appended at or after ``since_ms`` (stream IDs are insertion times in ms), oldest
    first, each with only ``metric``'s values, cut inside Redis ``PORT_CUT_CHUNK`` entries at a
    time. Unreadable entries are skipped."""
    cut = r.register_script(_METRIC_CUT)
    out: list[MetricCut] = []
    start: bytes | str = f"{max(since_ms, 0)}-0"
    while True:
        rows = await cut(keys=[keys.frames(fabric)], args=[start, metric, PORT_CUT_CHUNK])
        for eid, header, values in rows:
            try:
                h = json.loads(header)
                n, names = int(h["n"]), tuple(map(str, h["metrics"]))
                got = {metric: np.frombuffer(values, dtype="<f4").copy()} if len(values) == 4 * n else {}
                frame = Frame(str(h["fabric"]), str(h["topo"]), int(h["ts_ns"]), float(h["interval_s"]), got)
            except (ValueError, KeyError, TypeError):
                continue
            out.append(MetricCut(bytes(eid), frame, n, names))
        if len(rows) < PORT_CUT_CHUNK:
            return out
        start = b"(" + bytes(rows[-1][0])


async def async_latest(r: aioredis.Redis, fabric: str) -> Entry | None:
    entries = _decode(await r.xrevrange(keys.frames(fabric), count=1))
    return entries[0] if entries else None


async def async_wait(r: aioredis.Redis, fabric: str, after_id: bytes, block_ms: int) -> bool:
    """Block until a frame newer than ``after_id`` is appended (True) or ``block_ms`` passes."""
    return bool(await r.xread({keys.frames(fabric): after_id}, block=block_ms, count=1))
