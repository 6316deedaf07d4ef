"""The live app's verbs: who may watch, which fabrics exist, and the stream one view follows.

:class:`FabricStream` is everything a fabric WebSocket does, minus the socket: it reads the
fabric's Redis stream (``XREAD BLOCK``, so a new frame reaches the browser as soon as it is
appended — collectors need only :func:`fabricmon.telemetry.live_window.append`), encodes columns,
and applies flow control: at most ``MAX_IN_FLIGHT`` binary messages unacknowledged, and while a
client is behind only the *newest* frame is kept. Older ones are dropped, so a slow or stalled
browser costs the server one pending frame, not a growing buffer (daphne#170).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio as aioredis
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import ObjectDoesNotExist

from fabricmon.core.telemetry.frames import Frame
from fabricmon.core.topology.heatmap_rows import fabric_layout
from fabricmon.live import wire
from fabricmon.live.messages import PROTOCOL_VERSION, Hello
from fabricmon.telemetry import live_window
from fabricmon.topology import services as topology_services
from fabricmon.topology.models import Fabric

ROLE_GROUPS = ("operators", "admins")
MAX_IN_FLIGHT = 2
DEFAULT_WINDOW_S = 300.0
# A client that acknowledges nothing for this long is closed; it reconnects and resynchronises.
STALL_CLOSE_S = 30.0


def can_view(user: AbstractBaseUser | AnonymousUser) -> bool:
    """Operators and admins (and superusers) watch the fabric; anyone else is refused."""
    if not user.is_authenticated:
        return False
    if getattr(user, "is_superuser", False):
        return True
    return user.groups.filter(name__in=ROLE_GROUPS).exists()  # type: ignore[union-attr]


def is_admin(user: AbstractBaseUser | AnonymousUser) -> bool:
    return bool(getattr(user, "is_superuser", False)) or (
        user.is_authenticated and user.groups.filter(name="admins").exists()  # type: ignore[union-attr]
    )


def live_fabrics(r: redis.Redis) -> list[str]:
    """Fabrics that have frames in the live window, by name."""
    prefix = live_window.frames_key("")
    return sorted(k.decode()[len(prefix) :] for k in r.scan_iter(match=prefix + "*", count=500))


def fabric_spec(fabric: str) -> Any:
    """The fabric's topology from the topology app (``None`` when it is not imported)."""
    try:
        return topology_services.fabric_spec(fabric)
    except (ObjectDoesNotExist, LookupError):
        return None


def window_frames(frames: list[tuple[bytes, Frame]], window_s: float) -> list[Frame]:
    """The frames of the last ``window_s`` seconds that share the newest frame's port layout."""
    if not frames:
        return []
    newest = frames[-1][1]
    since_ns = newest.ts_ns - int(window_s * 1e9)
    return [f for _, f in frames if f.ts_ns > since_ns and f.topology_version == newest.topology_version]


def port_series(r: redis.Redis, fabric: str, position: int, window_s: float) -> dict[str, Any]:
    """Every metric of one port over the window: ``{"ts_ms": [...], "metrics": {name: [...]}}``;
    ``None`` marks no data (JSON has no NaN)."""
    frames = window_frames(live_window.read_window(r, fabric), window_s)
    frames = [f for f in frames if position < f.n_ports]
    names = sorted({m for f in frames for m in f.metrics})
    out: dict[str, list[float | None]] = {}
    for name in names:
        values = [float(f.metrics[name][position]) if name in f.metrics else float("nan") for f in frames]
        out[name] = [None if math.isnan(v) else v for v in values]
    units = {m: wire.scale_of(m)["unit"] for m in names}
    return {"ts_ms": [f.ts_ns / 1e6 for f in frames], "metrics": out, "units": units}


@dataclass
class FabricStream:
    """One browser's view of one fabric: snapshot on start, then one column per new frame."""

    r: aioredis.Redis
    fabric: str
    metric: str
    send_text: Callable[[dict[str, Any]], Awaitable[None]]
    send_bytes: Callable[[bytes], Awaitable[None]]
    window_s: float = DEFAULT_WINDOW_S
    stall_close_s: float = STALL_CLOSE_S
    seq: int = 0
    acked: int = 0
    last_id: bytes = b"0-0"
    topology_version: str | None = None
    n_ports: int = 0
    pending: Frame | None = None
    newest_ts_ns: int = 0  # time of the newest frame seen (the window's right edge)
    last_ack_monotonic: float = field(default_factory=time.monotonic)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def key(self) -> str:
        return live_window.frames_key(self.fabric)

    async def snapshot(self) -> None:
        """Hello + the whole window; the browser resets its view to exactly this."""
        # Stream IDs are insertion times in ms: read only the window (plus a little slack).
        since_ms = int(time.time() * 1000 - (self.window_s + 5) * 1000)
        raw = await self.r.xrange(self.key, min=f"{max(since_ms, 0)}-0")
        frames = [(eid, Frame.decode(fields[live_window.FIELD])) for eid, fields in raw]
        if not frames:  # nothing recent: still resume after the newest entry, however old
            newest_entry = await self.r.xrevrange(self.key, count=1)
            frames = [(eid, Frame.decode(f[live_window.FIELD])) for eid, f in newest_entry]
        window = window_frames(frames, self.window_s)
        newest = window[-1] if window else None
        self.last_id = frames[-1][0] if frames else b"0-0"
        self.n_ports = newest.n_ports if newest else 0
        self.newest_ts_ns = newest.ts_ns if newest else 0
        self.topology_version = newest.topology_version if newest else None
        interval_s = newest.interval_s if newest else 1.0
        metric = self.metric  # a frame without it draws as no data; the hello lists what exists
        hello: Hello = {
            "type": "hello",
            "protocol": PROTOCOL_VERSION,
            "fabric": self.fabric,
            "metric": metric,
            "metric_id": wire.METRIC_IDS[metric],
            "metrics": [m for m in wire.METRIC_IDS if newest is not None and m in newest.metrics],
            "scale": wire.scale_of(metric),
            "n_ports": self.n_ports,
            "topology_version": self.topology_version or "",
            "interval_s": interval_s,
            "window_cols": max(1, round(self.window_s / interval_s)),
            "max_in_flight": MAX_IN_FLIGHT,
        }
        self.pending = None
        chunks = wire.encode_window(window, metric, self.seq + 1, self.n_ports)
        self.seq += len(chunks)
        self.acked = self.seq - 1  # the window's last message needs its ack before columns flow
        await self.send_text(dict(hello))
        for chunk in chunks:
            await self.send_bytes(chunk)

    async def follow(self, block_ms: int = 2000) -> None:
        """Forever: wait for frames, keep the newest, send it when the client has room."""
        await self.snapshot()
        while True:
            got = await self.r.xread({self.key: self.last_id}, block=block_ms, count=1)
            if not got:
                await self._check_stalled()
                continue
            newest = await self.r.xrevrange(self.key, count=1)
            eid, fields = newest[0]
            self.last_id = eid
            frame = Frame.decode(fields[live_window.FIELD])
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

    async def on_subscribe(self, metric: str) -> None:
        wire.scale_of(metric)  # KeyError names an unknown metric
        async with self._lock:
            self.metric = metric
            await self.snapshot()

    async def _flush(self) -> None:
        if self.pending is None or self.seq - self.acked >= MAX_IN_FLIGHT:
            return
        frame, self.pending = self.pending, None
        if self.seq == self.acked:
            self.last_ack_monotonic = time.monotonic()
        self.seq += 1
        await self.send_bytes(wire.encode_column(frame, self.metric, self.seq, self.n_ports))

    async def _check_stalled(self) -> None:
        if self.seq > self.acked and time.monotonic() - self.last_ack_monotonic > self.stall_close_s:
            raise ClientStalledError(f"no acknowledgement for {self.stall_close_s:.0f} s")


class ClientStalledError(Exception):
    """The browser stopped reading; closing lets it reconnect and resynchronise."""


def async_redis() -> aioredis.Redis:
    # The read timeout must outlast XREAD BLOCK, or an idle fabric looks like a dead Redis.
    return aioredis.Redis.from_url(settings.REDIS_URL, socket_timeout=30, socket_connect_timeout=5)


# --- pages ---------------------------------------------------------------------------------------
def known_fabrics(r: redis.Redis) -> tuple[list[str], list[str]]:
    """(fabrics in the topology database, fabrics with live frames but no stored topology)."""
    stored = sorted(Fabric.objects.values_list("name", flat=True))
    return stored, sorted(set(live_fabrics(r)) - set(stored))


_LAYOUT_CACHE: dict[tuple[str, str, str], dict[str, Any]] = {}


def layout_for(fabric: str) -> dict[str, Any] | None:
    """The heatmap layout of a stored fabric (cached per topology version), ``None`` if unknown."""
    row = Fabric.objects.filter(name=fabric).values_list("topology_version", "updated").first()
    if row is None:
        return None
    key = (fabric, row[0], row[1].isoformat())
    if key not in _LAYOUT_CACHE:
        if len(_LAYOUT_CACHE) > 16:
            _LAYOUT_CACHE.clear()
        spec = topology_services.fabric_spec(fabric)
        _LAYOUT_CACHE[key] = fabric_layout(spec, topology_services.port_peers(fabric))
    return _LAYOUT_CACHE[key]


def switch_health(r: redis.Redis, fabric: str, switches: list[str]) -> list[dict[str, Any]]:
    """One row per switch (topology order, then any only the collectors know), ``state`` one of
    up / down / stale / never polled. Stale: no success for 3 poll intervals."""
    health = live_window.read_health(r, fabric)
    now_ns = time.time_ns()
    rows = []
    for name in [*switches, *sorted(set(health) - set(switches))]:
        h = health.get(name)
        if h is None:
            rows.append({"switch": name, "state": "never polled"})
            continue
        last_ns = h.get("last_success_ns") or 0
        interval_s = float(h.get("interval_s") or 1.0)
        age_s = (now_ns - last_ns) / 1e9 if last_ns else None
        stale = age_s is None or age_s > 3 * interval_s + 2
        state = "down" if not h.get("up") else ("stale" if stale else "up")
        rows.append({"switch": name, "state": state, "age_s": age_s, **h})
    return rows
