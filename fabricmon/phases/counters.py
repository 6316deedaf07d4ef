"""The counters the phase views compare with: each fabric's live-window frames, read incrementally
by stream id and kept decoded, and the bytes per poll interval over a run's time.

The stream is asked for what is new on each update (``live_window.newest_id`` / ``read_window``
after the last id seen); a stream that went away or was recreated is read again from scratch and
its ``generation`` bumped, so kept attribution sums built on the old one are given up.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from fabricmon.base.connections import connect
from fabricmon.core.telemetry.frames import Frame
from fabricmon.telemetry import live_window

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
MAX_FABRICS = 8  # fabrics whose decoded frames stay in memory (least recently asked for goes first)
# What the phase views read of a frame (``measured_bytes``): kept, copied out of the frame's blob;
# the other 9 metrics are not. A web process keeping all 11 held ~400 MB at 16,896 ports (the
# 600 s window), and grew with the window as the scale bench ran.
KEPT_METRICS = ("in_bps", "out_bps")


def _kept(frame: Frame) -> Frame:
    """The frame with only ``KEPT_METRICS``, each its own array (a decoded frame's arrays are views
    of its whole blob: keeping one would keep all)."""
    return replace(frame, metrics={m: frame.metrics[m].copy() for m in KEPT_METRICS if m in frame.metrics})


@dataclass
class FabricFrames:
    """Decoded counter frames of one fabric's live window, read incrementally by stream id."""

    last_id: bytes = b"-"
    frames: list[Frame] = field(default_factory=list)
    generation: int = 0  # bumped when the stream is read again from scratch (gone or recreated)

    def update(self, fabric: str) -> bytes:
        r = connect()
        newest_id = live_window.newest_id(r, fabric) or b"-"
        if newest_id == b"-" or (self.last_id != b"-" and _id_tuple(newest_id) < _id_tuple(self.last_id)):
            self.last_id, self.frames = b"-", []  # stream gone or recreated: start again
            self.generation += 1
        if newest_id not in (b"-", self.last_id):
            got = live_window.read_window(r, fabric, after_id=self.last_id)
            self.frames.extend(_kept(f) for _, f in got)
            self.last_id = got[-1][0] if got else self.last_id
            keep = live_window.length(r, fabric)
            if len(self.frames) > keep:  # the stream was trimmed: so is the copy
                del self.frames[: len(self.frames) - keep]
        return newest_id


def _id_tuple(eid: bytes) -> tuple[int, int]:
    ms, _, seq = eid.partition(b"-")
    return int(ms), int(seq or 0)


_FRAMES: OrderedDict[str, FabricFrames] = OrderedDict()


def kept(fabric: str) -> FabricFrames | None:
    """The fabric's frames as last read (None: never read in this process)."""
    return _FRAMES.get(fabric)


def frames_of(fabric: str) -> FabricFrames:
    """The fabric's cached frames (the 8 fabrics asked about most recently stay in memory)."""
    hit = _FRAMES.get(fabric)
    if hit is None:
        hit = _FRAMES[fabric] = FabricFrames()
        while len(_FRAMES) > MAX_FABRICS:
            _FRAMES.popitem(last=False)
    _FRAMES.move_to_end(fabric)
    return hit


def measured_bytes(fabric: str, t1_ns: int, t2_ns: int) -> tuple[IntArray, FloatArray, FloatArray] | None:
    """(edges, in bytes, out bytes) per poll interval from the cached live window, or None."""
    frames = [
        f
        for f in _FRAMES.get(fabric, FabricFrames()).frames
        if t1_ns <= f.ts_ns <= t2_ns and "in_bps" in f.metrics and "out_bps" in f.metrics
    ]
    if len(frames) < 3:
        return None
    ts = np.array([f.ts_ns for f in frames], dtype=np.int64)
    edges = np.concatenate([[ts[0] - int(frames[0].interval_s * 1e9)], ts])
    dt = np.diff(edges) / 1e9
    m_in = np.stack([np.asarray(f.metrics["in_bps"], dtype=np.float64) for f in frames]) / 8 * dt[:, None]
    m_out = np.stack([np.asarray(f.metrics["out_bps"], dtype=np.float64) for f in frames]) / 8 * dt[:, None]
    return edges, m_in, m_out


def first_edge(fabric: str) -> int | None:
    """The start of the oldest poll interval the fabric's kept frames hold (None: no frames)."""
    kept_frames = _FRAMES.get(fabric)
    if kept_frames is None or not kept_frames.frames:
        return None
    first = kept_frames.frames[0]
    return first.ts_ns - int(first.interval_s * 1e9)
