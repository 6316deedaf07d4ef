"""The job timeline: phases in time, line rate respected, lossless stretch vs lossy drops."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fabricmon.core.topology.port_index import build_port_index
from tests.topologies import four_leaf_two_spine
from twin.moe import MoeConfig, MoeTraffic
from twin.routing import Router, Wiring
from twin.schedule import JobTimeline

NS = 1_000_000_000


def _timeline(lossy: bool) -> tuple[JobTimeline, np.ndarray]:
    fabric = four_leaf_two_spine("t", servers=8)
    index = build_port_index(fabric)
    wiring = Wiring(fabric, index)
    tl = JobTimeline(MoeTraffic(MoeConfig(layers=4), wiring.n_gpus, seed=3), Router(wiring, "pxn"),
                     index.speed_bps, index.host_facing, 0, lossy=lossy, buffer_bytes=1e6)
    return tl, index.speed_bps / 8


@pytest.mark.parametrize("lossy", [False, True])
def test_phases_are_sequential_and_no_port_exceeds_line_rate(lossy):
    tl, line = _timeline(lossy)
    tl.ensure(2 * NS)
    phases = list(tl.phases)
    assert [p.kind for p in phases[:4]] == ["dispatch", "combine", "dispatch", "combine"]
    for a, b in itertools.pairwise(phases):
        assert b.start_ns >= a.end_ns
    for p in phases:
        dur = (p.end_ns - p.start_ns) / NS
        assert np.all(p.out_bytes / dur <= line * (1 + 1e-9))
        assert np.all(p.in_bytes / dur <= line * (1 + 1e-9))
    # Binned into 100 ms windows the rates stay within line rate too.
    for a in range(0, 2 * NS - NS // 10, NS // 10):
        _in_b, out_b, _ = tl.window_bytes(a, a + NS // 10)
        assert np.all(out_b / 0.1 <= line * (1 + 1e-9))


def test_lossless_never_drops_and_lossy_drops_at_the_hot_port():
    lossless, _ = _timeline(False)
    lossy, _ = _timeline(True)
    lossless.ensure(NS)
    lossy.ensure(NS)
    assert sum(p.out_dropped.sum() for p in lossless.phases) == 0.0
    dispatch = next(p for p in lossy.phases if p.kind == "dispatch")
    hot_port = int(np.argmax(dispatch.out_dropped))
    assert dispatch.out_dropped[hot_port] > 0
    assert hot_port == int(np.argmax(dispatch.out_bytes + dispatch.out_dropped))
    # Lossy phases are shorter: senders do not wait for the incast to drain.
    assert lossy.phases[0].end_ns - lossy.phases[0].start_ns < lossless.phases[0].end_ns - lossless.phases[0].start_ns
