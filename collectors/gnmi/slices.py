"""A gNMI switch's slice of a frame: the metrics of one interval from its subscription's arrays.

The shard's gNMI tick loop (``fabricmon.telemetry.gnmi_loop``) calls :func:`take_slice` once per
tick per switch; the interval maths is :class:`~collectors.gnmi.metrics.IntervalTaker`, and the
result is the same :class:`~fabricmon.core.telemetry.slices.SwitchSlice` an SNMP poll gives
(``collectors.snmp.slices``), timed by the device's own timestamps.
"""

from __future__ import annotations

import numpy as np

from collectors.gnmi.metrics import GnmiSnapshot, IntervalTaker
from collectors.gnmi.paths import LEAF_INDEX
from fabricmon.core.telemetry.slices import SwitchSlice

_OCTETS = LEAF_INDEX["in_octets"]


def _device_ns(snap: GnmiSnapshot) -> int:
    return int(snap.ts_ns[_OCTETS].max())


def take_slice(name: str, taker: IntervalTaker, now_ns: int) -> SwitchSlice:
    """The switch's slice since the previous take; a gap (not ok) when no new sample arrived."""
    prev = taker.prev
    metrics = taker.take()
    t0, t1 = _device_ns(prev), _device_ns(taker.prev)
    if t0 == 0 or t1 <= t0:
        reason = "no_baseline" if t1 > 0 else "gap"
        nan = np.full(len(taker.speed_bps), np.nan, dtype=np.float32)
        return SwitchSlice(name, None, t1 or now_ns, dict.fromkeys(metrics, nan), {reason: len(nan)})
    dropped = int(np.isnan(metrics["out_bps"]).sum())
    return SwitchSlice(name, t0, t1, metrics, {"invalid": dropped} if dropped else {})
