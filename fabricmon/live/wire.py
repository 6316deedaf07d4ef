"""Frames → the compact binary WebSocket messages of :mod:`fabricmon.live.messages`.

Pure numpy, no Django: one vectorised pass per column, so encoding a 16,384-port column costs
microseconds and a client's update is ``20 + n_ports`` bytes (≈1 byte per port).

Scales are per metric. Bit rates are linear by default, from 0 to the fabric's fastest port
(0.4 % of line rate per step: a 400G port's step is 1.6 Gbit/s): on a log scale from 1 kbit/s
to 1 Tbit/s every busy host port was the same yellow, and an incast at twice its neighbours' rate
moved three codes. Log (254 steps over 9 decades, ≈8.5 % per step) stays an option
(``scale="log"``), for seeing idle and slow ports beside hot ones. Packet and event rates
(discards, ECN marks, PFC pauses) span decades with no line rate to bound them: log only.
Fractions are linear (0.4 % per step). The browser stretches the contrast further (per window
or per rail, frontend/static/live/heatmap.js); the codes stay on this scale.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from fabricmon.core.telemetry.frames import METRICS, Frame
from fabricmon.live.messages import (
    CODE_MAX,
    COLUMN_HEADER_BYTES,
    FLAG_LAST,
    KIND_COLUMN,
    KIND_WINDOW,
    NO_DATA,
    WINDOW_CHUNK_BYTES,
    WINDOW_HEADER_BYTES,
    Scale,
)

# Stable ids: position in the frame metric table (new metrics are appended there).
METRIC_IDS: dict[str, int] = {name: i for i, name in enumerate(METRICS)}

SCALES: dict[str, Scale] = {
    "util": {"kind": "linear", "lo": 0.0, "hi": 1.0, "unit": "%"},
    "pfc_paused_fraction": {"kind": "linear", "lo": 0.0, "hi": 1.0, "unit": "%"},
    "in_bps": {"kind": "log", "lo": 1e3, "hi": 1e12, "unit": "bit/s"},
    "out_bps": {"kind": "log", "lo": 1e3, "hi": 1e12, "unit": "bit/s"},
    "watermark_bytes": {"kind": "log", "lo": 1e2, "hi": 1e10, "unit": "B"},
}
_PACKET_RATE: Scale = {"kind": "log", "lo": 1.0, "hi": 1e10, "unit": "pkt/s"}
DEFAULT_METRIC = "util"
SCALE_KINDS = ("linear", "log")
BIT_RATES = ("in_bps", "out_bps")
DEFAULT_LINE_RATE_BPS = 400e9  # a fabric whose port speeds are not known yet

_COLUMN = struct.Struct("<BBHIId")  # kind, metric_id, reserved, seq, n_ports, ts_ms
_WINDOW = struct.Struct("<BBHIIIII")  # kind, metric_id, reserved, seq, n_ports, n_cols, pad, pad

assert _COLUMN.size == COLUMN_HEADER_BYTES and _WINDOW.size == WINDOW_HEADER_BYTES

U8Array = npt.NDArray[np.uint8]


def scale_of(metric: str, kind: str = "log", line_rate_bps: float | None = None) -> Scale:
    """The metric's scale. ``kind`` matters for bit rates only: ``linear`` spans 0 to
    ``line_rate_bps`` (the fabric's fastest port), ``log`` 1 kbit/s to 1 Tbit/s. The default
    ``log`` keeps what other callers (units, port pages) have always read."""
    if metric not in METRIC_IDS:
        raise KeyError(f"unknown metric {metric!r}; known: {', '.join(METRIC_IDS)}")
    if kind not in SCALE_KINDS:
        raise KeyError(f"unknown scale {kind!r}; known: {', '.join(SCALE_KINDS)}")
    if metric in BIT_RATES and kind == "linear":
        hi = float(line_rate_bps) if line_rate_bps and line_rate_bps > 0 else DEFAULT_LINE_RATE_BPS
        return {"kind": "linear", "lo": 0.0, "hi": hi, "unit": "bit/s"}
    if metric in SCALES:
        return SCALES[metric]
    unit = "pause/s" if metric == "pfc_pause_ps" else _PACKET_RATE["unit"]
    return {**_PACKET_RATE, "unit": unit}


def quantise(values: npt.ArrayLike, scale: Scale) -> U8Array:
    """Values → u8 codes 0..254 on ``scale``; NaN (no data) → 255. Out-of-range values clip."""
    v = np.asarray(values, dtype=np.float64)
    missing = ~np.isfinite(v)
    lo, hi = scale["lo"], scale["hi"]
    if scale["kind"] == "log":
        with np.errstate(divide="ignore", invalid="ignore"):
            pos = (np.log10(np.maximum(v, lo)) - np.log10(lo)) / (np.log10(hi) - np.log10(lo))
    else:
        pos = (v - lo) / (hi - lo)
    pos = np.nan_to_num(pos, nan=0.0)
    codes = np.rint(np.clip(pos, 0.0, 1.0) * CODE_MAX).astype(np.uint8)
    codes[missing] = NO_DATA
    return codes


def dequantise(codes: npt.ArrayLike, scale: Scale) -> npt.NDArray[np.float64]:
    """The inverse (to bin precision); 255 → NaN. The browser does the same in protocol.js."""
    c = np.asarray(codes, dtype=np.float64)
    pos = c / CODE_MAX
    lo, hi = scale["lo"], scale["hi"]
    if scale["kind"] == "log":
        out = 10 ** (np.log10(lo) + pos * (np.log10(hi) - np.log10(lo)))
    else:
        out = lo + pos * (hi - lo)
    out[c == NO_DATA] = np.nan
    return out


def frame_column(frame: Frame, metric: str, n_ports: int, scale: Scale | None = None) -> U8Array:
    """One column for ``metric`` on ``scale`` (default: the metric's); a frame without it, or of
    another port count, is all *no data*."""
    values = frame.metrics.get(metric)
    if values is None or len(values) != n_ports:
        return np.full(n_ports, NO_DATA, dtype=np.uint8)
    return quantise(values, scale or scale_of(metric))


def encode_column(frame: Frame, metric: str, seq: int, n_ports: int, scale: Scale | None = None) -> bytes:
    head = _COLUMN.pack(KIND_COLUMN, METRIC_IDS[metric], 0, seq, n_ports, frame.ts_ns / 1e6)
    return head + frame_column(frame, metric, n_ports, scale).tobytes()


def encode_window(frames: Sequence[Frame], metric: str, first_seq: int, n_ports: int, *,
                  chunk_bytes: int = WINDOW_CHUNK_BYTES, scale: Scale | None = None) -> list[bytes]:
    """The whole window as WINDOW messages of ≤ ``chunk_bytes`` (at least one column, and at
    least one message even for an empty window), oldest first; the last carries ``FLAG_LAST``.
    Message i has sequence number ``first_seq + i``."""
    per_msg = max(1, chunk_bytes // max(1, n_ports + 8))
    starts = list(range(0, len(frames), per_msg)) or [0]
    out = []
    for i, a in enumerate(starts):
        part = frames[a : a + per_msg]
        ts_ms = np.array([f.ts_ns / 1e6 for f in part], dtype="<f8")
        body = np.empty((len(part), n_ports), dtype=np.uint8)
        for j, f in enumerate(part):  # one vectorised pass per column (≤ window length), not per port
            body[j] = frame_column(f, metric, n_ports, scale)
        flags = FLAG_LAST if i == len(starts) - 1 else 0
        head = _WINDOW.pack(KIND_WINDOW, METRIC_IDS[metric], flags, first_seq + i, n_ports, len(part), 0, 0)
        out.append(head + ts_ms.tobytes() + body.tobytes())
    return out


def message_flags(blob: bytes) -> int:
    return int.from_bytes(blob[2:4], "little")


def decode_message(blob: bytes) -> tuple[int, int, int, npt.NDArray[np.float64], U8Array]:
    """(kind, metric_id, seq, ts_ms[cols], codes[cols, ports]) — for tests and the benchmark."""
    kind = blob[0]
    if kind == KIND_COLUMN:
        _, mid, _, seq, n, ts = _COLUMN.unpack_from(blob)
        codes = np.frombuffer(blob, np.uint8, offset=_COLUMN.size, count=n)
        return kind, mid, seq, np.array([ts]), codes.reshape(1, n)
    if kind == KIND_WINDOW:
        _, mid, _, seq, n, cols, _, _ = _WINDOW.unpack_from(blob)
        ts_arr = np.frombuffer(blob, "<f8", offset=_WINDOW.size, count=cols).astype(np.float64)
        codes = np.frombuffer(blob, np.uint8, offset=_WINDOW.size + 8 * cols, count=cols * n)
        return kind, mid, seq, ts_arr, codes.reshape(cols, n)
    raise ValueError(f"unknown live message kind {kind}")
