"""One browser's view of one fabric over the WebSocket, minus the socket.

:class:`FabricStream` waits on the fabric's live window (``live_window.async_wait``: ``XREAD
BLOCK``, so a new frame reaches the browser as soon as it is appended — collectors need only
:func:`fabricmon.telemetry.live_window.append`), encodes columns, and applies flow control: at most
``MAX_IN_FLIGHT`` binary messages unacknowledged, and while a client is behind only the *newest*
frame is kept. Older ones are dropped, so a slow or stalled browser costs the server one pending
frame, not a growing buffer (daphne#170).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from channels.db import database_sync_to_async

from fabricmon.core.telemetry.frames import Frame
from fabricmon.live import wire
from fabricmon.live.messages import PROTOCOL_VERSION, Hello, Scale
from fabricmon.live.services import DEFAULT_WINDOW_S, window_frames
from fabricmon.telemetry import live_window
from fabricmon.topology.fabric_view import find_view

MAX_IN_FLIGHT = 2
# A client that acknowledges nothing for this long is closed; it reconnects and resynchronises.
STALL_CLOSE_S = 30.0


@dataclass
class FabricStream:
    """One browser's view of one fabric: snapshot on start, then one column per new frame."""

    r: aioredis.Redis
    fabric: str
    metric: str
    send_text: Callable[[dict[str, Any]], Awaitable[None]]
    send_bytes: Callable[[bytes], Awaitable[None]]
    window_s: float = DEFAULT_WINDOW_S
    scale_kind: str = "linear"  # bit rates: linear to the line rate (default) or log
    stall_close_s: float = STALL_CLOSE_S
    seq: int = 0
    acked: int = 0
    last_id: bytes = b"0-0"
    topology_version: str | None = None
    n_ports: int = 0
    pending: Frame | None = None
    scale: Scale | None = None  # what the codes sent now mean (the hello's)
    newest_ts_ns: int = 0  # time of the newest frame seen (the window's right edge)
    last_ack_monotonic: float = field(default_factory=time.monotonic)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def snapshot(self) -> None:
        """Hello + the whole window; the browser resets its view to exactly this."""
        # Stream IDs are insertion times in ms: read only the window (plus a little slack).
        since_ms = int(time.time() * 1000 - (self.window_s + 5) * 1000)
        # (of each frame only the metric drawn, cut in Redis: whole frames were ~220 MB a connect
        # at 16,896 ports)
        cuts = await live_window.async_metric_since(self.r, self.fabric, since_ms, self.metric)
        if not cuts:  # nothing recent: still resume after the newest entry, however old
            newest_entry = await live_window.async_latest(self.r, self.fabric)
            if newest_entry is not None:
                eid, f = newest_entry
                cuts = [live_window.MetricCut(eid, f, f.n_ports, tuple(f.metrics))]
        window = window_frames([(c.eid, c.frame) for c in cuts], self.window_s)
        newest = window[-1] if window else None
        self.last_id = cuts[-1].eid if cuts else b"0-0"
        self.n_ports = cuts[-1].n_ports if cuts else 0
        self.newest_ts_ns = newest.ts_ns if newest else 0
        self.topology_version = newest.topology_version if newest else None
        interval_s = newest.interval_s if newest else 1.0
        metric = self.metric  # a frame without it draws as no data; the hello lists what exists
        line_rate = await database_sync_to_async(_line_rate)(self.fabric)
        self.scale = wire.scale_of(metric, self.scale_kind, line_rate)
        hello: Hello = {
            "type": "hello",
            "protocol": PROTOCOL_VERSION,
            "fabric": self.fabric,
            "metric": metric,
            "metric_id": wire.METRIC_IDS[metric],
            "metrics": [m for m in wire.METRIC_IDS if cuts and m in cuts[-1].metrics],
            "scale": self.scale,
            "scale_kinds": list(wire.SCALE_KINDS) if metric in wire.BIT_RATES else [self.scale["kind"]],
            "n_ports": self.n_ports,
            "topology_version": self.topology_version or "",
            "interval_s": interval_s,
            "window_cols": max(1, round(self.window_s / interval_s)),
            "max_in_flight": MAX_IN_FLIGHT,
        }
        self.pending = None
        chunks = wire.encode_window(window, metric, self.seq + 1, self.n_ports, scale=self.scale)
        self.seq += len(chunks)
        self.acked = self.seq - 1  # the window's last message needs its ack before columns flow
        await self.send_text(dict(hello))
        for chunk in chunks:
            await self.send_bytes(chunk)

    async def follow(self, block_ms: int = 2000) -> None:
        """Forever: wait for frames, keep the newest, send it when the client has room."""
        await self.snapshot()
        while True:
            if not await live_window.async_wait(self.r, self.fabric, self.last_id, block_ms):
                await self._check_stalled()
                continue
            newest = await live_window.async_latest(self.r, self.fabric)
            if newest is None:  # the window was dropped meanwhile
                continue
            eid, frame = newest
            self.last_id = eid
            self.newest_ts_ns = max(self.newest_ts_ns, frame.ts_ns)
            async with self._lock:
                if frame.topology_version != self.topology_version:
                    await self.snapshot()  # re-cabled or first frame: resynchronise
                    continue
                self.pending = frame
                await self._flush()
            await self._check_stalled()

    async def on_ack(self, seq: int) -> None:
        async with self._lock:
            if self.acked < seq <= self.seq:
                self.acked = seq
                self.last_ack_monotonic = time.monotonic()
            await self._flush()

    async def on_subscribe(self, metric: str, scale_kind: str | None = None) -> None:
        kind = scale_kind or self.scale_kind
        wire.scale_of(metric, kind)  # KeyError names an unknown metric or scale
        async with self._lock:
            self.metric, self.scale_kind = metric, kind
            await self.snapshot()

    async def _flush(self) -> None:
        if self.pending is None or self.seq - self.acked >= MAX_IN_FLIGHT:
            return
        frame, self.pending = self.pending, None
        if self.seq == self.acked:
            self.last_ack_monotonic = time.monotonic()
        self.seq += 1
        await self.send_bytes(wire.encode_column(frame, self.metric, self.seq, self.n_ports, self.scale))

    async def _check_stalled(self) -> None:
        if self.seq > self.acked and time.monotonic() - self.last_ack_monotonic > self.stall_close_s:
            raise ClientStalledError(f"no acknowledgement for {self.stall_close_s:.0f} s")


def _line_rate(fabric: str) -> float | None:
    """The fabric's fastest port (bit/s), the top of a linear bit-rate scale (None: unknown)."""
    view = find_view(fabric)
    if view is None or not len(view.index):
        return None
    return float(view.index.speed_bps.max())


class ClientStalledError(Exception):
    """The browser stopped reading; closing lets it reconnect and resynchronise."""
