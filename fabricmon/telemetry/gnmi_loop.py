"""The gNMI side of a shard: one subscription per switch, one slice per switch per tick.

For the shard's switches collected over gNMI (``collector`` = ``gnmi`` or ``both`` and the switch
has a gNMI target), a :class:`~collectors.gnmi.session.GnmiCollector` keeps one Subscribe STREAM
per switch (reconnecting with capped, jittered backoff); a tick loop per switch turns the decoded
arrays into that switch's slice of the frame, on the same wall-clock grid as the SNMP loops::

    GnmiCollector ── sessions (one stream per switch) ── TargetArrays (device timestamps)
    tick loop ── every I: IntervalTaker.take() ─▶ SwitchSlice (in/out bps, util, ECN, PFC,
                 watermark, drops) ─▶ framer.report ─▶ health (same shape as SNMP + "gnmi")

``both``: gNMI gives the frame while its stream is up; the SNMP loop keeps polling and fills in
while it is down (its health carries the gNMI session's under ``"gnmi"``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

from collectors.gnmi.metrics import IntervalTaker
from collectors.gnmi.session import GnmiCollector, GnmiSession, GnmiTargetSpec
from collectors.gnmi.slices import take_slice
from fabricmon.core.telemetry.slices import SwitchSlice
from fabricmon.core.topology.spec import SwitchSpec
from fabricmon.telemetry.framing import FabricFramer

GNMI_PROTOCOLS = ("gnmi", "both")


def gnmi_switches(specs: Mapping[str, SwitchSpec], protocols: Mapping[str, str]) -> list[str]:
    """Switches of ``specs`` to subscribe to: protocol gnmi/both and a gNMI target configured."""
    return [n for n, sw in specs.items() if protocols.get(n) in GNMI_PROTOCOLS and sw.gnmi is not None]


def target_spec(sw: SwitchSpec, framer: FabricFramer) -> GnmiTargetSpec:
    assert sw.gnmi is not None
    sl = framer.slices[sw.name]
    # Sample at least twice per tick of this switch: a stream sampled once per tick, at an arbitrary
    # phase to the tick grid, leaves every tick its jitter crosses without a fresh sample (seen as
    # half the frames empty under load); at two a tick, each has one whatever the phase.
    interval_s = min(sw.gnmi.sample_interval_s, framer.interval_ns[sw.name] / 2e9)
    return GnmiTargetSpec(sw.name, sw.mgmt_address, sw.gnmi.port, framer.index.port_names[sl],
                          sample_interval_s=interval_s)


async def gnmi_switch_loop(
    sw: SwitchSpec, session: GnmiSession, framer: FabricFramer, *,
    deliver: Callable[[str, int, SwitchSlice], None],
    record: Callable[[str, int, SwitchSlice, dict[str, Any]], None],
    running: Callable[[], bool] = lambda: True,
) -> None:
    """Every tick of the switch's interval: take the interval's metrics, deliver, record health."""
    sl = framer.slices[sw.name]
    taker = IntervalTaker(session.arrays, framer.index.speed_bps[sl])
    interval_ns = framer.interval_ns[sw.name]
    while running():
        scheduled = (time.time_ns() // interval_ns + 1) * interval_ns
        await asyncio.sleep((scheduled - time.time_ns()) / 1e9)
        part = take_slice(sw.name, taker, time.time_ns())
        deliver(sw.name, framer.frame_tick(scheduled), part)
        record(sw.name, scheduled, part, session.health())


def start_collector(specs: list[GnmiTargetSpec]) -> GnmiCollector | None:
    """Start the shard's sessions on the running loop (None when the shard has no gNMI switch)."""
    if not specs:
        return None
    coll = GnmiCollector(specs)
    coll.start()
    return coll
