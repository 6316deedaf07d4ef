"""From two :class:`IfSnapshot` of one switch to per-port rates in a fixed port order.

The bridge between the poller and :mod:`fabricmon.core.telemetry.rates`: aligns both snapshots to the
switch's ports as the fabric's port index orders them (``ifindex``), picks the counter width per
column (Counter64 octets/packets, Counter32 discards/errors) and passes sysUpTime and
ifCounterDiscontinuityTime through. ``None`` for a snapshot = that poll failed = every port a gap.
Each port's rate runs between the read times of its own cells (``IfSnapshot.cell_ts_ns``) when
the snapshot has them: a walk spans several round trips, one poll timestamp would smear them.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from collectors.snmp.oids import COUNTER_WIDTH_BITS
from collectors.snmp.poller import IfSnapshot
from fabricmon.core.telemetry.rates import CounterRates, CounterRead, align_ports, counter_rates


def _read(snap: IfSnapshot | None, key: str, ifindex: npt.NDArray[np.int64], prev_ts_ns: int) -> CounterRead:
    if snap is None or key not in snap.counters:
        return CounterRead(ts_ns=prev_ts_ns, values=None)
    values, present = align_ports(snap.ifindex, snap.counters[key], ifindex)
    disc = None
    if snap.discontinuity_ticks is not None:
        disc_aligned, _ = align_ports(snap.ifindex, snap.discontinuity_ticks, ifindex)
        disc = disc_aligned.astype(np.int64)
    ts: int | npt.NDArray[np.int64] = snap.ts_ns
    if snap.cell_ts_ns is not None and key in snap.cell_ts_ns:
        cell_ts, _ = align_ports(snap.ifindex, snap.cell_ts_ns[key], ifindex)
        ts = np.where(present, cell_ts, snap.ts_ns).astype(np.int64)  # absent ports: a gap anyway
    return CounterRead(
        ts_ns=ts,
        values=values.astype(np.uint64),
        sys_uptime_ticks=snap.sys_uptime_ticks,
        discontinuity_ticks=disc,
        present=present,
    )


def snapshot_rates(
    prev: IfSnapshot | None,
    cur: IfSnapshot | None,
    ifindex: npt.ArrayLike,
    speed_bps: npt.ArrayLike,
) -> dict[str, CounterRates]:
    """Rates per counter key ("in_octets" → bytes/s, "in_discards" → packets/s, …) for the ports
    ``ifindex`` (in that order), each with its reason codes. Keys served by neither snapshot are
    absent; a key missing on one side is an all-gap result."""
    order = np.asarray(ifindex, dtype=np.int64)
    keys = set(prev.counters if prev else ()) | set(cur.counters if cur else ())
    known = cur or prev
    ts = known.ts_ns if known is not None else 0
    out: dict[str, CounterRates] = {}
    for key in sorted(keys):
        width = COUNTER_WIDTH_BITS[key]
        out[key] = counter_rates(
            _read(prev, key, order, ts - 1),
            _read(cur, key, order, ts),
            speed_bps,
            width_bits=32 if width == 32 else 64,
            unit="octets" if key.endswith("octets") else "packets",
        )
    return out
