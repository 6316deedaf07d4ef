"""Interface counters as continuous piecewise-linear functions of time, with a bounded history.

At each tick k (≥ 10 Hz) the clock stores the counter values V_k (uint64, exact), the rates r_k
and the instant u_k up to which they hold (the span the tick's rates were computed for). Between
ticks a counter reads::

    value(t) = V_k + ⌊r_k · (min(t, u_k) − t_k)⌋    t_k ≤ t < t_{k+1}      (uint64: wraps at 2^64)

and the next tick starts from exactly that value, so a counter never jumps (unless a fault says so)
and a poller's rate over [t1, t2] equals the truth integrated over exactly [t1, t2]. A tick that
comes late (a starved ticker) finds the counter held at u_k, not run on at rates meant for another
span: the ticker then lays the missed ticks, so what the schedule put in that span is counted, late
but whole, and no value already read is ever taken back. The truth
(``mean_rates``) integrates the stored rates — a separate path from the counter values, so tests
can hold one against the other.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

# Column order of the value/rate arrays (per port).
METRICS: tuple[str, ...] = (
    "ifHCInOctets",
    "ifHCOutOctets",
    "ifHCInUcastPkts",
    "ifHCOutUcastPkts",
    "ifInDiscards",
    "ifOutDiscards",
    "ifInErrors",
)
RATE_NAMES: tuple[str, ...] = (
    "in_octets_per_s",
    "out_octets_per_s",
    "in_pkts_per_s",
    "out_pkts_per_s",
    "in_discards_per_s",
    "out_discards_per_s",
    "in_errors_per_s",
)
HC_METRICS = np.array([0, 1, 2, 3])  # 64-bit counters (the ones a wrap fault moves)
U64 = npt.NDArray[np.uint64]
_NO_END = np.iinfo(np.int64).max  # a segment whose rates hold until the next tick, however late
F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Tick:
    """One stored segment start: time, values, and the rates that hold until the next tick."""

    t_ns: int
    values: U64  # (P, M)
    rates: F64  # (P, M) per second


class CounterClock:
    """Ring of ticks for ``n_ports`` ports; thread-safe (the ticker writes, agents and tests read)."""

    def __init__(self, n_ports: int, t0_ns: int, initial: U64, capacity: int) -> None:
        if initial.shape != (n_ports, len(METRICS)):
            raise ValueError(f"initial values shape {initial.shape} != ({n_ports}, {len(METRICS)})")
        self.n_ports, self.capacity = n_ports, max(4, capacity)
        m = len(METRICS)
        self._t = np.zeros(self.capacity, dtype=np.int64)
        self._v = np.zeros((self.capacity, n_ports, m), dtype=np.uint64)
        self._r = np.zeros((self.capacity, n_ports, m), dtype=np.float32)
        self._u = np.zeros(self.capacity, dtype=np.int64)  # each segment's rates hold until then
        self._count = 0  # ticks ever stored; physical slot = k % capacity
        self._lock = threading.Lock()
        self._append(t0_ns, initial.astype(np.uint64), np.zeros((n_ports, m)), _NO_END)

    # -- writing (ticker thread) ------------------------------------------------------------------
    def _append(self, t_ns: int, values: U64, rates: F64, until_ns: int) -> None:
        slot = self._count % self.capacity
        self._t[slot] = t_ns
        self._v[slot] = values
        self._r[slot] = rates
        self._u[slot] = max(t_ns, until_ns)
        self._count += 1

    def advance(
        self, t_ns: int, rates: F64, *, until_ns: int | None = None,
        overrides: list[tuple[object, U64 | int]] | None = None,
    ) -> None:
        """Close the running segment at ``t_ns`` and start one with ``rates``, holding until
        ``until_ns`` (no bound by default); after it the counters stay put until the next tick.

        ``overrides`` are (index into the (P, M) value array, new value) applied at ``t_ns`` — the
        discontinuities faults inject (restart → 0, wrap → near 2^64).
        """
        with self._lock:
            last = (self._count - 1) % self.capacity
            if t_ns < self._t[last]:
                raise ValueError(f"tick at {t_ns} before the last tick {self._t[last]}")
            values = self._value_in(last, t_ns)
            for where, val in overrides or ():
                values[where] = val  # type: ignore[call-overload]
            self._append(t_ns, values, rates, _NO_END if until_ns is None else until_ns)

    # -- reading ----------------------------------------------------------------------------------
    def _value_in(self, slot: int, t_ns: int, ports: slice = slice(None)) -> U64:
        dt_s = (min(t_ns, int(self._u[slot])) - int(self._t[slot])) / 1e9
        inc = np.floor(self._r[slot, ports].astype(np.float64) * dt_s).astype(np.uint64)
        return self._v[slot, ports] + inc  # uint64 addition wraps modulo 2^64, like the real counter

    def _ordered_slots(self) -> npt.NDArray[np.int64]:
        n = min(self._count, self.capacity)
        return (np.arange(self._count - n, self._count) % self.capacity).astype(np.int64)

    @property
    def oldest_ns(self) -> int:
        with self._lock:
            return int(self._t[self._ordered_slots()[0]])

    @property
    def latest(self) -> Tick:
        with self._lock:
            s = (self._count - 1) % self.capacity
            return Tick(int(self._t[s]), self._v[s].copy(), self._r[s].astype(np.float64))

    def values_at(self, t_ns: int, ports: slice | None = None) -> U64:
        """Counter values (P, M) at ``t_ns``; raises if ``t_ns`` is older than the kept history."""
        with self._lock:
            slots = self._ordered_slots()
            times = self._t[slots]
            k = int(np.searchsorted(times, t_ns, side="right")) - 1
            if k < 0:
                raise ValueError(f"t_ns={t_ns} is before the kept history (oldest {int(times[0])})")
            return self._value_in(int(slots[k]), t_ns, ports if ports is not None else slice(None))

    def mean_rates(self, t1_ns: int, t2_ns: int, ports: slice | None = None) -> F64:
        """The truth: rates (P, M) averaged over exactly [t1, t2], integrated from stored rates."""
        if t2_ns <= t1_ns:
            raise ValueError(f"empty interval [{t1_ns}, {t2_ns}]")
        with self._lock:
            slots = self._ordered_slots()
            starts = self._t[slots].astype(np.float64)
            if t1_ns < starts[0]:
                raise ValueError(f"t1_ns={t1_ns} is before the kept history (oldest {int(starts[0])})")
            ends = np.minimum(np.append(starts[1:], np.inf), self._u[slots].astype(np.float64))
            overlap = np.clip(np.minimum(ends, t2_ns) - np.maximum(starts, t1_ns), 0.0, None)
            used = overlap > 0
            sl = ports if ports is not None else slice(None)
            r = self._r[slots[used]][:, sl].astype(np.float64)
            return np.tensordot(overlap[used], r, axes=(0, 0)) / float(t2_ns - t1_ns)
