"""Decoded gNMI state → the frame metrics of one interval (names from fabricmon.core.telemetry.frames).

The collection loop calls :func:`take_interval` once per frame tick per target; it snapshots the
target's arrays and compares with the previous snapshot *per leaf and port*, using the device
timestamps of each value (not arrival time)::

    rate = (v_cur − v_prev) / (ts_cur − ts_prev)        per (leaf, port)

NaN (no data) where a value was never seen, did not advance in the interval (stream down), went
down (reset: a restarted target), or moved faster than the line allows (garbage or a missed
reset) — never a negative rate or a spike. ``watermark_bytes`` is the max ``max-queue-len``
over all samples in the interval (each sample is a read-and-clear on the device).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from collectors.gnmi.decode import TargetArrays
from collectors.gnmi.paths import LEAF_INDEX
from fabricmon.core.telemetry.rates import LINE_RATE_SLACK, MIN_FRAME_BITS

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]

GNMI_METRICS = (
    "in_bps",
    "out_bps",
    "util",
    "in_discards_ps",
    "out_discards_ps",
    "in_errors_ps",
    "ecn_marked_ps",
    "pfc_pause_ps",
    "pfc_paused_fraction",
    "watermark_bytes",
    "drops_ps",
)


# The counter leaves interval_metrics reads: what a collector subscribes to. The other counters a
# target offers (MAC pause frames, a queue's transmitted octets and packets) would be decoded a
# sample at a time and never used — a quarter of the updates of a stream at 16,896 ports.
SAMPLED_KEYS: tuple[str, ...] = (
    "in_octets", "out_octets", "in_discards", "out_discards", "in_errors",
    "q_dropped_pkts", "q_ecn_marked_pkts", "q_max_len",
    "pfc_rx_frames", "pfc_tx_frames", "pfc_rx_duration_us", "pfc_tx_duration_us",
)


@dataclass(frozen=True)
class GnmiSnapshot:
    """A copy of one target's decoded arrays at a frame tick."""

    values: npt.NDArray[np.uint64]
    ts_ns: npt.NDArray[np.int64]
    watermark: npt.NDArray[np.uint64]  # max-queue-len max since the previous snapshot


def snapshot(arrays: TargetArrays) -> GnmiSnapshot:
    wm = arrays.take_peak()[0]  # the one gauge_max leaf: q_max_len
    return GnmiSnapshot(arrays.values.copy(), arrays.ts_ns.copy(), wm)


def _rate(prev: GnmiSnapshot, cur: GnmiSnapshot, key: str, ceiling_per_s: F64) -> F64:
    r = LEAF_INDEX[key]
    t0, t1 = prev.ts_ns[r], cur.ts_ns[r]
    dt = (t1 - t0) / 1e9
    ok = (t0 > 0) & (t1 > t0)
    a, b = prev.values[r], cur.values[r]
    ok &= b >= a  # a decrease is a reset (restarted target): drop, never negative
    delta = (b - a).astype(np.float64)  # uint64 delta first: exact, then small enough for float
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(ok, delta / np.where(ok, dt, 1.0), np.nan)
    known = np.isfinite(ceiling_per_s) & (ceiling_per_s > 0)
    rate[known & (rate > ceiling_per_s * LINE_RATE_SLACK)] = np.nan
    return rate


def interval_metrics(prev: GnmiSnapshot, cur: GnmiSnapshot, speed_bps: npt.ArrayLike) -> dict[str, F32]:
    """Frame metrics for the ports of one target between two snapshots."""
    speed = np.asarray(speed_bps, dtype=np.float64)
    octets_ps, pkts_ps = speed / 8.0, speed / MIN_FRAME_BITS
    in_bps = _rate(prev, cur, "in_octets", octets_ps) * 8.0
    out_bps = _rate(prev, cur, "out_octets", octets_ps) * 8.0
    with np.errstate(invalid="ignore", divide="ignore"):
        util = np.fmax(in_bps, out_bps) / np.where(speed > 0, speed, np.nan)
    pause_ps = _rate(prev, cur, "pfc_rx_frames", pkts_ps) + _rate(prev, cur, "pfc_tx_frames", pkts_ps)
    one_s_us = np.full(len(speed), 1e6)
    paused = (
        np.fmax(
            _rate(prev, cur, "pfc_rx_duration_us", one_s_us), _rate(prev, cur, "pfc_tx_duration_us", one_s_us)
        )
        / 1e6
    )
    wm_row = LEAF_INDEX["q_max_len"]
    fresh = cur.ts_ns[wm_row] > prev.ts_ns[wm_row]
    out = {
        "in_bps": in_bps,
        "out_bps": out_bps,
        "util": util,
        "in_discards_ps": _rate(prev, cur, "in_discards", pkts_ps),
        "out_discards_ps": _rate(prev, cur, "out_discards", pkts_ps),
        "in_errors_ps": _rate(prev, cur, "in_errors", pkts_ps),
        "ecn_marked_ps": _rate(prev, cur, "q_ecn_marked_pkts", pkts_ps),
        "pfc_pause_ps": pause_ps,
        "pfc_paused_fraction": np.minimum(paused, 1.0),
        "watermark_bytes": np.where(fresh, cur.watermark.astype(np.float64), np.nan),
        "drops_ps": _rate(prev, cur, "q_dropped_pkts", pkts_ps),
    }
    return {k: v.astype(np.float32) for k, v in out.items()}


class IntervalTaker:
    """Per-target previous snapshot, so the collection loop only calls :meth:`take` per tick."""

    def __init__(self, arrays: TargetArrays, speed_bps: npt.ArrayLike) -> None:
        self.arrays = arrays
        self.speed_bps = np.asarray(speed_bps, dtype=np.float64)
        self.prev = snapshot(arrays)

    def take(self) -> dict[str, F32]:
        """Metrics since the previous take (all NaN on the first interval without data)."""
        cur = snapshot(self.arrays)
        out = interval_metrics(self.prev, cur, self.speed_bps)
        self.prev = cur
        return out
