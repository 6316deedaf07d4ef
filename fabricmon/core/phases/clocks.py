"""Clock alignment of a run's phase events with switch counters, and its error bound.

Two sources of error remain after the probe's NTP-style offset exchange (``X-Clock-Offset-Ns``):

* the exchange itself: ± half the round trip of the best sample;
* ranks whose host clock drifted, or that never exchanged: seen directly, because all ranks'
  ends of the *same* collective coincide within microseconds (the last peer's data arrives at
  every rank at once)::

        rank 0   ──[ dispatch 3.1 ]──|            ends coincide …
        rank 1      ──[ dispatch 3.1 ]──|
        rank 5 (host clock +0.5 s)          ……  ──[ dispatch 3.1 ]──|   … except a skewed rank

Per rank, the skew is the median over collectives of (its end − the median end across ranks).
The alignment error bound is the largest remaining |skew| plus the exchange's half round trip.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class ClockAlignment:
    """What is known about the run's clocks relative to the server's."""

    offset_known: bool  # every rank reported an offset from the exchange
    rank_skew_ns: FloatArray  # (R,) estimated residual skew per rank (NaN: rank never seen)
    exchange_error_ns: float  # half the round trip of the exchange (0 when not reported)
    collectives: int  # collective instances the skew was estimated from

    @property
    def error_bound_ns(self) -> float:
        """Upper bound on how far an event time may be from the server's clock."""
        seen = self.rank_skew_ns[np.isfinite(self.rank_skew_ns)]
        return float(np.abs(seen).max(initial=0.0)) + self.exchange_error_ns

    def worst_rank(self) -> int:
        s = np.where(np.isfinite(self.rank_skew_ns), np.abs(self.rank_skew_ns), -1.0)
        return int(np.argmax(s)) if len(s) else -1


def estimate_skew(
    instance: IntArray,
    rank: IntArray,
    end_ns: IntArray,
    world_size: int,
    *,
    offset_known: bool = True,
    exchange_error_ns: float = 0.0,
) -> ClockAlignment:
    """Residual per-rank skew from end times of the same collective instance across ranks.

    ``instance`` numbers the collective (e.g. one per (step, layer, phase)); rows are events.
    """
    inst = np.asarray(instance, dtype=np.int64)
    rk = np.asarray(rank, dtype=np.int64)
    end = np.asarray(end_ns, dtype=np.int64)
    skew = np.full(world_size, np.nan)
    if not len(inst):
        return ClockAlignment(offset_known, skew, exchange_error_ns, 0)
    ids, inst_n = np.unique(inst, return_inverse=True)
    grid = np.full((len(ids), world_size), np.nan)
    ok = (rk >= 0) & (rk < world_size)
    # relative to the first event: keeps float64 exact at ns resolution
    grid[inst_n[ok], rk[ok]] = (end[ok] - end.min()).astype(np.float64)
    ref = np.nanmedian(grid, axis=1, keepdims=True)
    dev = grid - ref
    seen = np.isfinite(dev).any(axis=0)
    skew[seen] = np.nanmedian(dev[:, seen], axis=0)
    return ClockAlignment(offset_known, skew, float(exchange_error_ns), len(ids))
