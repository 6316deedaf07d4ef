"""Counter rates from two snapshots of one switch: wraps, resets and gaps, vectorized.

A switch counter is a monotonic integer that the agent may wrap (32-bit), reset (reboot, ``clear
counters``) or stop serving (failed poll). A rate is only drawn when we *know* what happened
between two reads; everything else is dropped to ``NaN`` with a reason code, never turned into a
negative rate, a zero, or a spike::

    prev poll ──────── dt ──────── cur poll
       │                              │
       ├─ poll failed on either side ─┼─▶ GAP            (no carried value)
       ├─ sysUpTime went down ────────┼─▶ UPTIME_DROP    (agent restarted: every port)
       ├─ ifCounterDiscontinuityTime ─┼─▶ DISCONTINUITY  (that port)
       ├─ 64-bit counter decreased ───┼─▶ RESET_DECREASE (a 64-bit wrap takes years: it is a reset)
       ├─ 32-bit counter decreased ───┼─▶ one wrap assumed (discards/errors are Counter32)
       ├─ 32-bit octets could wrap twice in dt at the port's speed ─▶ WRAP_AMBIGUOUS (withheld)
       └─ delta above line rate x1.05 ┴─▶ ABOVE_LINE_RATE (a missed wrap or reset)

A 32-bit octet counter wraps after 2**32 bytes: 3.4 s at 10 Gb/s line rate, 86 ms at 400 Gb/s.
Where a switch serves only the 32-bit ifTable counters for a port (no HC cell), one wrap per
interval can be undone, more cannot be seen: if the port could have counted 2**32 units within
the interval at its speed, the rate is withheld (``wrap_check`` ports), never guessed.

Raw Counter64 values are kept as ``uint64`` (exact up to 2**64-1). Only the *delta*, which is
small, is converted to float64. Never store raw counters as float64 (2**53 bytes is one day at
800G) — see reference/telemetry.md §4.

:func:`prometheus_increase` reproduces PromQL ``increase()`` so tests can show how we differ:
Prometheus treats every decrease as a reset-to-zero and keeps the post-reset value, which
under-counts a 32-bit wrap by ``2**32 - prev`` and turns a reset-after-growth into a guess.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from itertools import pairwise
from typing import Literal

import numpy as np
import numpy.typing as npt

U64Array = npt.NDArray[np.uint64]
F64Array = npt.NDArray[np.float64]
I64Array = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
ReasonArray = npt.NDArray[np.uint8]

LINE_RATE_SLACK = 1.05
# The smallest Ethernet frame on the wire: 64 B + 8 B preamble + 12 B inter-frame gap = 672 bit.
MIN_FRAME_BITS = 672
_MASK32 = np.uint64(0xFFFF_FFFF)

CounterUnit = Literal["octets", "packets"]


class RateReason(IntEnum):
    """Why a port's rate is (or is not) drawn. Stored as uint8 beside the rate array."""

    OK = 0
    GAP = 1  # a poll failed, or the port is absent from one of the two snapshots
    RESET_DECREASE = 2  # a 64-bit counter went down: reset, not wrap
    UPTIME_DROP = 3  # sysUpTime went down: the agent restarted, every counter is suspect
    DISCONTINUITY = 4  # ifCounterDiscontinuityTime changed for this port
    ABOVE_LINE_RATE = 5  # physically impossible delta: a missed wrap or reset
    BAD_INTERVAL = 6  # timestamps not increasing
    BAD_VALUE = 7  # a 32-bit counter holding a value >= 2**32
    WRAP_AMBIGUOUS = 8  # a 32-bit counter could have wrapped more than once in the interval
    STALE = 9  # the agent answered an unchanged (cached) counter while time moved on
    NO_CELL = 10  # the port is there, but not this counter's cell (missing or bad) in one read
    WIDTH_CHANGED = 11  # one read had the HC counter, the other the 32-bit one: not comparable


@dataclass(frozen=True)
class CounterRead:
    """One switch's read of one counter column, aligned to a fixed port order.

    ``values`` is ``None`` when the poll failed (an explicit gap). ``present`` marks ports that
    the snapshot actually contained (``None`` = all present). ``ts_ns`` is when the agent read
    the counters: one Unix-epoch int for the whole read, or an int64 array with one read time per
    port (a walk spans several request/response round trips, and the rate moves meanwhile).
    """

    ts_ns: int | I64Array
    values: U64Array | None
    sys_uptime_ticks: int | None = None
    discontinuity_ticks: I64Array | None = None
    present: BoolArray | None = None


@dataclass(frozen=True)
class CounterRates:
    """Per-port result: ``rate_per_s`` (counter units per second; NaN = dropped), the exact
    ``delta`` as float64 (NaN = dropped) and a :class:`RateReason` code per port.
    ``interval_s`` is a float when both reads had one timestamp, else a float64 array per port."""

    rate_per_s: F64Array
    delta: F64Array
    reason: ReasonArray
    interval_s: float | F64Array

    def counts(self) -> dict[str, int]:
        """How many ports ended with each reason (for health and logs)."""
        codes, n = np.unique(self.reason, return_counts=True)
        return {RateReason(int(c)).name.lower(): int(k) for c, k in zip(codes, n, strict=True)}


def as_counter_array(values: Sequence[int] | npt.ArrayLike) -> U64Array:
    """Exact uint64 array from Python ints (never via float64)."""
    return np.asarray(values, dtype=np.uint64)


def counter_rates(
    prev: CounterRead,
    cur: CounterRead,
    speed_bps: npt.ArrayLike,
    *,
    width_bits: Literal[32, 64] | npt.NDArray[np.uint8] = 64,
    unit: CounterUnit = "octets",
    slack: float = LINE_RATE_SLACK,
    wrap_check: bool | BoolArray = False,
) -> CounterRates:
    """Rates between two reads of one counter column of one switch.

    ``speed_bps`` per port (0 or NaN = unknown speed: no line-rate check). For ``unit="octets"``
    the ceiling is ``speed_bps / 8`` bytes/s; for ``"packets"`` it is ``speed_bps / 672`` (minimum
    frames back to back). Timestamps may be per port (arrays): each port's rate is then its delta
    over its own interval, and a port whose interval is not positive is ``BAD_INTERVAL``.
    ``width_bits`` may be per port (a switch serving HC counters for some ports, 32-bit ones for
    others). ``wrap_check`` (per port or all) withholds a 32-bit port's rate as
    ``WRAP_AMBIGUOUS`` when its speed could count 2**32 units within the interval.
    """
    n = _port_count(prev, cur, speed_bps)
    reason = np.zeros(n, dtype=np.uint8)
    delta = np.full(n, np.nan)
    dt_s = _interval_s(prev.ts_ns, cur.ts_ns, n)
    if prev.values is None or cur.values is None:
        reason[:] = RateReason.GAP
        return CounterRates(np.full(n, np.nan), delta, reason, dt_s)

    a = np.asarray(prev.values, dtype=np.uint64)
    b = np.asarray(cur.values, dtype=np.uint64)
    # uint64 subtraction is modular: exact for 64-bit deltas, and masked below for 32-bit wraps.
    diff = b - a
    is32 = np.broadcast_to(np.asarray(width_bits) == 32, (n,))
    reason[is32 & ((a > _MASK32) | (b > _MASK32))] = RateReason.BAD_VALUE
    diff = np.where(is32, diff & _MASK32, diff)  # 32-bit: one wrap assumed on a decrease
    reason[~is32 & (b < a)] = RateReason.RESET_DECREASE
    delta_f = diff.astype(np.float64)

    speed = np.asarray(speed_bps, dtype=np.float64)
    units_per_bit = 1 / 8 if unit == "octets" else 1 / MIN_FRAME_BITS
    ceiling = speed * units_per_bit * slack * dt_s
    known = np.isfinite(speed) & (speed > 0)
    could_wrap_twice = is32 & np.broadcast_to(np.asarray(wrap_check, dtype=bool), (n,)) & known
    could_wrap_twice &= ceiling >= float(2**32)
    reason[(reason == RateReason.OK) & could_wrap_twice] = RateReason.WRAP_AMBIGUOUS
    reason[(reason == RateReason.OK) & known & (delta_f > ceiling)] = RateReason.ABOVE_LINE_RATE
    reason[np.broadcast_to(np.asarray(dt_s) <= 0, (n,))] = RateReason.BAD_INTERVAL

    # Stronger evidence overrides the value-based codes, in increasing precedence.
    pd, cd = prev.discontinuity_ticks, cur.discontinuity_ticks
    if pd is not None and cd is not None:
        reason[np.asarray(pd) != np.asarray(cd)] = RateReason.DISCONTINUITY
    if (
        prev.sys_uptime_ticks is not None
        and cur.sys_uptime_ticks is not None
        and cur.sys_uptime_ticks < prev.sys_uptime_ticks
    ):
        reason[:] = RateReason.UPTIME_DROP
    for read in (prev, cur):
        if read.present is not None:
            reason[~np.asarray(read.present, dtype=bool)] = RateReason.GAP

    ok = reason == RateReason.OK
    delta[ok] = delta_f[ok]
    with np.errstate(divide="ignore", invalid="ignore"):  # dt <= 0 only where delta is NaN
        rate = delta / dt_s
    return CounterRates(rate, delta, reason, dt_s)


def _interval_s(prev_ts_ns: int | I64Array, cur_ts_ns: int | I64Array, n: int) -> float | F64Array:
    """cur - prev in seconds: a float for two scalar stamps, else a float64 array per port. The
    difference is taken in int64 (exact), only then converted: epoch ns do not fit float64."""
    if np.ndim(prev_ts_ns) == 0 and np.ndim(cur_ts_ns) == 0:
        return (int(cur_ts_ns) - int(prev_ts_ns)) / 1e9
    a = np.asarray(prev_ts_ns, dtype=np.int64)
    b = np.asarray(cur_ts_ns, dtype=np.int64)
    for ts in (a, b):
        if ts.ndim and ts.shape != (n,):
            raise ValueError(f"timestamp array has shape {ts.shape}, expected ({n},) (one per port)")
    return np.broadcast_to((b - a) / 1e9, (n,)).astype(np.float64)


def _port_count(prev: CounterRead, cur: CounterRead, speed_bps: npt.ArrayLike) -> int:
    n = int(np.asarray(speed_bps).shape[0])
    for read in (prev, cur):
        if read.values is not None and len(read.values) != n:
            raise ValueError(f"counter array has {len(read.values)} ports, speed_bps has {n}")
    return n


def align_ports(
    ifindex: npt.ArrayLike, values: npt.NDArray[np.generic], to_ifindex: npt.ArrayLike
) -> tuple[npt.NDArray[np.generic], BoolArray]:
    """Reorder ``values`` (indexed by ``ifindex``) into the order ``to_ifindex``.

    Returns the reordered array (zeros where absent) and a ``present`` mask; a port the switch did
    not report is absent, never a carried or zero *rate* (callers pass ``present`` on).
    """
    src = np.asarray(ifindex, dtype=np.int64)
    dst = np.asarray(to_ifindex, dtype=np.int64)
    out = np.zeros(len(dst), dtype=values.dtype)
    if len(src) == 0:
        return out, np.zeros(len(dst), dtype=bool)
    order = np.argsort(src, kind="stable")
    sorted_src = src[order]
    pos = np.minimum(np.searchsorted(sorted_src, dst), len(src) - 1)
    present = sorted_src[pos] == dst
    out[present] = values[order][pos[present]]
    return out, np.asarray(present, dtype=bool)


def prometheus_increase(
    ts_s: Sequence[float], values: Sequence[float], range_start_s: float, range_end_s: float
) -> float | None:
    """PromQL ``increase()`` over one range, as ``promql/functions.go::extrapolatedRate`` computes it.

    Any decrease is a reset to zero (the post-reset value is added back), then the result is
    extrapolated to the range edges (at most half a sample spacing beyond the data, never below a
    counter's zero). Returns ``None`` for fewer than two samples, like Prometheus' empty result.
    Shown for comparison only; fabricmon drops such intervals instead (see module docstring).
    """
    pts = [(t, v) for t, v in zip(ts_s, values, strict=True) if range_start_s <= t <= range_end_s]
    if len(pts) < 2:
        return None
    correction = 0.0
    for (_, v0), (_, v1) in pairwise(pts):
        if v1 < v0:
            correction += v0
    first_t, first_v = pts[0]
    last_t, last_v = pts[-1]
    result = last_v - first_v + correction
    to_start = first_t - range_start_s
    to_end = range_end_s - last_t
    sampled = last_t - first_t
    avg = sampled / (len(pts) - 1)
    if result > 0 and first_v >= 0:
        to_start = min(to_start, sampled * (first_v / result))
    threshold = avg * 1.1
    span = sampled + (to_start if to_start < threshold else avg / 2)
    span += to_end if to_end < threshold else avg / 2
    return result * (span / sampled)
