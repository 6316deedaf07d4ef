"""Frames: the unit that flows from collectors to every consumer.

A frame is one fabric at one instant: for each metric, one float32 per port in the order of the
fabric's :class:`~fabricmon.core.topology.port_index.PortIndex`. ``NaN`` means *no data* (failed poll, stale
switch, dropped reset sample) — never zero. A frame names the port-index ``topology_version`` it
was built against.

Wire form (Redis live window, history): ``b"FMF1"`` + u32 header length + JSON header + the
metric arrays back to back, little-endian float32. Compact and zero-copy to decode.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

MAGIC = b"FMF1"

# Metric names and units. Collectors fill what their protocol provides; absent metrics are absent
# (not NaN-filled) so the dashboard's selector shows only what exists.
METRICS: dict[str, str] = {
    "in_bps": "bit/s",
    "out_bps": "bit/s",
    "util": "fraction of line rate (max of in, out)",
    "in_discards_ps": "packets/s",
    "out_discards_ps": "packets/s",
    "in_errors_ps": "packets/s",
    "ecn_marked_ps": "packets/s",
    "pfc_pause_ps": "pause frames/s",
    "pfc_paused_fraction": "fraction of the interval paused",
    "watermark_bytes": "bytes (max queue since last read)",
    "drops_ps": "packets/s",
}

FloatArray = npt.NDArray[np.float32]


class FrameFormatError(ValueError):
    """A byte string that is not a frame (wrong magic, truncated, inconsistent header)."""


@dataclass(frozen=True)
class Frame:
    fabric: str
    topology_version: str
    ts_ns: int  # end of the interval this frame describes, Unix epoch ns
    interval_s: float
    metrics: Mapping[str, FloatArray]

    @property
    def n_ports(self) -> int:
        return len(next(iter(self.metrics.values()))) if self.metrics else 0

    def encode(self) -> bytes:
        names = list(self.metrics)
        n = self.n_ports
        for name in names:
            if self.metrics[name].shape != (n,):
                raise ValueError(f"metric {name!r} has shape {self.metrics[name].shape}, expected ({n},)")
        header = json.dumps(
            {
                "fabric": self.fabric,
                "topo": self.topology_version,
                "ts_ns": self.ts_ns,
                "interval_s": self.interval_s,
                "n": n,
                "metrics": names,
            },
            separators=(",", ":"),
        ).encode()
        body = b"".join(np.ascontiguousarray(self.metrics[m], dtype="<f4").tobytes() for m in names)
        return MAGIC + struct.pack("<I", len(header)) + header + body

    @classmethod
    def decode(cls, blob: bytes) -> Frame:
        if len(blob) < 8 or blob[:4] != MAGIC:
            raise FrameFormatError("not a fabricmon frame (bad magic)")
        (hlen,) = struct.unpack_from("<I", blob, 4)
        try:
            header = json.loads(blob[8 : 8 + hlen])
            n = int(header["n"])
            names = list(header["metrics"])
        except (ValueError, KeyError, TypeError) as exc:
            raise FrameFormatError(f"frame header unreadable: {exc}") from exc
        need = 8 + hlen + 4 * n * len(names)
        if len(blob) != need:
            raise FrameFormatError(f"frame is {len(blob)} bytes, header says {need}")
        flat = np.frombuffer(blob, dtype="<f4", offset=8 + hlen, count=n * len(names))
        metrics = {name: flat[i * n : (i + 1) * n] for i, name in enumerate(names)}
        return cls(
            fabric=str(header["fabric"]),
            topology_version=str(header["topo"]),
            ts_ns=int(header["ts_ns"]),
            interval_s=float(header["interval_s"]),
            metrics=metrics,
        )
