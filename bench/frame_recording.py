"""A recording of a run's frames as the detector read them, to replay detection offline
(bench/detect_replay.py): one 12-minute scale run is ~16 minutes of the box, a replay of its ~800
windows with another detector setting is seconds, scored against the same twin truth.

Only the metrics the detector reads are kept (``DETECT_METRICS``); each is a (frames, ports)
float32 array, NaN where the frame had no data, exactly as the live window held it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import redis

from fabricmon.telemetry import live_window

DETECT_METRICS = ("out_bps", "util", "watermark_bytes", "ecn_marked_ps", "pfc_pause_ps",
                  "pfc_paused_fraction")


class FrameRecorder:
    """Drains the fabric's live window (a Redis stream) from where it last read: call ``drain``
    more often than the window's length, or frames fall out of the stream unread."""

    def __init__(self, r: redis.Redis, fabric: str) -> None:
        self.r, self.fabric = r, fabric
        self.cursor: bytes | str = b"-"
        self.ts_ns: list[int] = []
        self.version = ""
        self.metrics: dict[str, list[np.ndarray]] = {m: [] for m in DETECT_METRICS}

    def drain(self, chunk: int = 10) -> int:
        got = 0
        while True:
            entries = live_window.read_window(self.r, self.fabric, after_id=self.cursor, count=chunk)
            for eid, frame in entries:
                self.cursor = eid
                n = frame.n_ports
                if self.version and frame.topology_version != self.version:
                    continue
                self.version = frame.topology_version
                self.ts_ns.append(frame.ts_ns)
                for m in DETECT_METRICS:
                    arr = frame.metrics.get(m)
                    # absent: a metric no collector filled (never NaN-filled on the wire); kept as
                    # NaN here and dropped again on replay when absent from every frame
                    self.metrics[m].append(np.array(arr, np.float32) if arr is not None
                                           else np.full(n, np.nan, np.float32))
            got += len(entries)
            if len(entries) < chunk:
                return got

    def save(self, path: Path) -> None:
        present = {m: np.stack(v) for m, v in self.metrics.items()
                   if v and not all(np.isnan(a).all() for a in v)}
        np.savez(path, ts_ns=np.array(self.ts_ns, np.int64), topology_version=np.array(self.version),
                 **present)


def load(path: Path) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(ts_ns per frame, metric → (frames, ports) array)."""
    with np.load(path) as z:
        return z["ts_ns"], {m: z[m] for m in DETECT_METRICS if m in z.files}
