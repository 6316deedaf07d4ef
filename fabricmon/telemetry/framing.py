"""Frames from switch slices: one frame per fabric per tick, exactly once, as early as possible.

Every collector (one per shard, possibly on different machines) reports each switch's slice for a
tick into one Redis hash per fabric and tick. Whoever reports the *last* due switch builds the
frame at once — no slow timer between the last counter read and the browser::

    fm:tick:{fabric}:{tick_ns}   hash  switch → encoded slice (b"" = explicit poll failure)
    fm:latest:{fabric}           hash  switch → last good slice (for switches polled less often)
    fm:framed:{fabric}:{tick_ns} SET NX guard: the frame of a tick is appended once

    shard A: leaf0 ✓ leaf1 ✓ ─┐
    shard B: spine0 ✓ ────────┼─▶ HLEN == due(tick) ─▶ SET NX framed ─▶ assemble ─▶ XADD live window
    shard C: (dead) ──────────┘            │
                                 deadline ─┘ (every live shard of the fabric tries; C's ports → NaN)

Ticks are wall-clock multiples of the fabric's frame interval (the smallest switch interval); a
switch polled every ``I`` is *due* in the ticks that contain one of its poll times. A switch not
due in a tick contributes its latest slice while that is younger than its interval; otherwise NaN.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import redis

from fabricmon.base import keys
from fabricmon.core.telemetry.frames import METRICS, Frame, FrameFormatError
from fabricmon.core.telemetry.slices import SLICE_METRICS
from fabricmon.core.topology.port_index import PortIndex, build_port_index
from fabricmon.core.topology.spec import FabricSpec
from fabricmon.telemetry import live_window

# Lua: record one switch's slice for a tick and return how many switches have reported.
_REPORT = """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
if string.len(ARGV[2]) > 0 then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
end
return redis.call('HLEN', KEYS[1])
"""
TICK_TTL_MS = 120_000
# After a tick's deadline a slice is late; the frame is built with what is there. The deadline is
# each due switch's measured walk time (mean + 3 deviations, EWMA) plus this grace, and never later
# than DEADLINE_MAX_FRACTION of the frame interval (the next tick's polls start then).
DEADLINE_GRACE_S = 0.25
DEADLINE_MAX_FRACTION = 0.95
WALK_ALPHA = 0.2  # EWMA weight of the newest walk time


@dataclass
class FabricFramer:
    """Everything needed to frame one fabric: its port index and who is due in which tick."""

    spec: FabricSpec
    window_s: float
    index: PortIndex = field(init=False)
    frame_ns: int = field(init=False)
    interval_ns: dict[str, int] = field(init=False)
    slices: dict[str, slice] = field(init=False)
    walk_s: dict[str, tuple[float, float]] = field(init=False)  # switch → (EWMA walk time, EWMA |dev|)

    def __post_init__(self) -> None:
        self.measured: set[str] = set()
        self.index = build_port_index(self.spec)
        self.interval_ns = {sw.name: round(sw.snmp.interval_s * 1e9) for sw in self.spec.switches}
        self.frame_ns = min(self.interval_ns.values())
        self.slices = {name: self.index.slice_of(name) for name in self.index.switch_names}
        # Until a walk is measured, assume it may take its whole timeout budget (timeout x attempts).
        self.walk_s = {sw.name: (min(sw.snmp.timeout_s * (sw.snmp.retries + 1), self.frame_ns / 1e9), 0.0)
                       for sw in self.spec.switches}

    @property
    def fabric(self) -> str:
        return self.spec.name

    @property
    def max_frames(self) -> int:
        return max(1, math.ceil(self.window_s * 1e9 / self.frame_ns))

    def observe_walk(self, switch: str, seconds: float) -> None:
        """Fold one measured walk (poll duration) of ``switch`` into its deadline estimate."""
        mean, dev = self.walk_s.get(switch, (seconds, 0.0))
        if switch not in self.measured:
            mean, dev = seconds, 0.0
            self.measured.add(switch)
        dev = (1 - WALK_ALPHA) * dev + WALK_ALPHA * abs(seconds - mean)
        self.walk_s[switch] = ((1 - WALK_ALPHA) * mean + WALK_ALPHA * seconds, dev)

    def deadline_s(self, tick_ns: int) -> float:
        """How long after ``tick_ns`` its frame waits for slow switches (their measured walk times)."""
        due = self.due(tick_ns)
        slowest = max((m + 3 * d for n, (m, d) in self.walk_s.items() if n in due), default=0.0)
        return min(slowest + DEADLINE_GRACE_S, DEADLINE_MAX_FRACTION * self.frame_ns / 1e9)

    def frame_tick(self, poll_ns: int) -> int:
        """The frame tick a poll scheduled at ``poll_ns`` belongs to."""
        return (poll_ns // self.frame_ns) * self.frame_ns

    def is_due(self, switch: str, tick_ns: int) -> bool:
        interval = self.interval_ns[switch]
        first_poll = -(-tick_ns // interval) * interval  # ceil to the switch's own grid
        return first_poll < tick_ns + self.frame_ns

    def due(self, tick_ns: int) -> list[str]:
        return [s for s in self.interval_ns if self.is_due(s, tick_ns)]

    def report(self, r: redis.Redis, switch: str, tick_ns: int, blob: bytes) -> Frame | None:
        """Record a switch's slice (``b""`` = failed poll); build the frame if the tick is complete."""
        frames = self.report_many(r, [(switch, tick_ns, blob)])
        return frames[0] if frames else None

    def report_many(
        self, r: redis.Redis, reports: Sequence[tuple[str, int, bytes]], *,
        also: Callable[[Any], None] | None = None,
    ) -> list[Frame]:
        """Record many (switch, tick, slice) in one round trip, ``also`` adding its own commands to
        the same pipeline; build every tick they made complete. A shard's gNMI switches all take
        their slices at the tick boundary: a call each (and one for its health) was two blocking
        round trips a switch a tick on the collector's event loop, a third of its time at 16,896
        ports, while the streams it should be reading queued up."""
        if not reports and also is None:
            return []
        pipe = r.pipeline(transaction=False)
        for switch, tick_ns, blob in reports:
            pipe.eval(_REPORT, 2, keys.tick(self.fabric, tick_ns), keys.latest_slices(self.fabric),
                      switch, blob, TICK_TTL_MS)
        if also is not None:
            also(pipe)
        counts = pipe.execute()[: len(reports)]
        reported: dict[int, int] = {}  # tick → how many switches had reported (the most seen)
        for (_, tick_ns, _), n in zip(reports, counts, strict=True):
            reported[tick_ns] = max(reported.get(tick_ns, 0), int(n))
        frames = []
        for tick_ns, n in sorted(reported.items()):
            if n >= len(self.due(tick_ns)) and (frame := self.build(r, tick_ns)) is not None:
                frames.append(frame)
        return frames

    def build(
        self, r: redis.Redis, tick_ns: int, *, at_deadline: bool = False, gap: bool = False
    ) -> Frame | None:
        """Assemble and append the tick's frame unless someone already did (or, at the deadline,
        nobody reported anything: a fabric with no live collector gets no frames, not NaN ones).
        ``gap``: a tick a new holder found unframed when it took the shard over — built with what
        reported, explicit no-data for the rest, so the window has no hole."""
        reported = r.hgetall(keys.tick(self.fabric, tick_ns))
        if at_deadline and not reported and not gap:
            return None
        if not r.set(keys.framed(self.fabric, tick_ns), b"1", nx=True, px=TICK_TTL_MS):
            return None
        latest = _str_keys(r.hgetall(keys.latest_slices(self.fabric)))
        frame = self.assemble(tick_ns, _str_keys(reported), latest)
        live_window.append(r, frame, max_frames=self.max_frames)
        return frame

    def assemble(self, tick_ns: int, reported: dict[str, bytes], latest: dict[str, bytes]) -> Frame:
        n = len(self.index)
        metrics = {m: np.full(n, np.nan, dtype=np.float32) for m in SLICE_METRICS}
        for switch, sl in self.slices.items():
            blob = reported.get(switch)
            if blob is None and not self.is_due(switch, tick_ns):
                blob = latest.get(switch)
                fresh_after = tick_ns - self.interval_ns[switch] - self.frame_ns
            else:
                fresh_after = None
            if not blob:
                continue  # failed poll, missing (dead shard) or nothing recent: NaN
            try:
                part = Frame.decode(blob)
            except FrameFormatError:
                continue
            if fresh_after is not None and part.ts_ns < fresh_after:
                continue
            if part.n_ports != sl.stop - sl.start:
                continue  # sliced against another topology version; drawn as no data
            for m, values in part.metrics.items():
                if m not in metrics:
                    if m not in METRICS:
                        continue  # not a frame metric: ignored, never guessed at
                    # gNMI slices carry ECN/PFC/watermark: frames have them once any switch does
                    metrics[m] = np.full(n, np.nan, dtype=np.float32)
                metrics[m][sl] = values
        return Frame(self.fabric, self.index.version, tick_ns, self.frame_ns / 1e9, metrics)


def _str_keys(h: dict[bytes, bytes]) -> dict[str, bytes]:
    return {k.decode(): v for k, v in h.items()}
