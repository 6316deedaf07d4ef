"""One switch's part of a frame: the frame metrics of that switch's ports for one sample.

Both collectors produce this shape — SNMP from two reads of the interface tables
(``collectors.snmp.slices``), gNMI from two snapshots of a subscription
(``collectors.gnmi.slices``) — and the framer assembles a fabric's frame from the slices of a tick::

    SwitchSlice(switch, t_prev_ns, t_cur_ns, metrics={"in_bps": …, "util": …}, dropped={reason: n})
        ok: a rate over [t_prev, t_cur]; not ok (t_prev None): a gap or no baseline yet — NaN

``encode`` is the wire form in the framer's per-tick Redis hash: a Frame named after the switch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from fabricmon.core.telemetry.frames import Frame

F32Array = npt.NDArray[np.float32]
I64Array = npt.NDArray[np.int64]

# The frame metrics an SNMP slice fills, in the order of fabricmon.core.telemetry.frames.METRICS
# (gNMI slices carry these and the queue metrics: ECN, PFC, watermark, drops).
SLICE_METRICS = ("in_bps", "out_bps", "util", "in_discards_ps", "out_discards_ps", "in_errors_ps")


@dataclass(frozen=True)
class SwitchSlice:
    """The frame metrics of one switch for one sample, over ``[t_prev_ns, t_cur_ns]``."""

    switch: str
    t_prev_ns: int | None
    t_cur_ns: int
    metrics: Mapping[str, F32Array]
    dropped: Mapping[str, int]  # reason name → ports dropped (not OK), summed over counters
    # metric → (prev, cur) read time per port (Unix-epoch ns) of the counters its rate came from:
    # each port's rate is over exactly that span (empty for a gap / no baseline).
    port_span_ns: Mapping[str, tuple[I64Array, I64Array]] = field(default_factory=dict)
    # metric → why each port's value is (not) there, a ``rates.RateReason`` code per port (uint8):
    # what a port's health explains (empty: not known per port, e.g. gNMI or a whole-switch gap).
    reasons: Mapping[str, npt.NDArray[np.uint8]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.t_prev_ns is not None

    def encode(self, topology_version: str) -> bytes:
        """Wire form for the per-tick hash: a Frame named after the switch (ts = end, interval = span)."""
        span_s = (self.t_cur_ns - self.t_prev_ns) / 1e9 if self.t_prev_ns is not None else 0.0
        return Frame(self.switch, topology_version, self.t_cur_ns, span_s, dict(self.metrics)).encode()
