"""The twin at the scale bench's size (bench/scale.py: 704 servers x 8 GPUs, 8 spines — 16,896
ports, 5,632 GPUs in 22 EP groups of 256): what one step builds and what the twin keeps are
bounded by groups x G² and by bytes, never by n_gpus² or by how long it runs. Sizes only: the
bench prints the times.

    spine0 … spine7                       32 uplinks per leaf, 4 to each spine
    leaf-su0-r0 … leaf-su21-r7            176 rail leaves
    node001 … node704 × 8 GPUs            EP group g = GPUs 256g … 256g+255 = SU g
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from fabricmon.core.topology.port_index import build_port_index
from fabricmon.core.topology.railgen import rail_optimized
from twin.fabric_queues import FabricQueues, peer_positions
from twin.moe import MoeConfig, MoeTraffic
from twin.routing import Router, Wiring
from twin.schedule import JobTimeline

NS = 1_000_000_000
T0 = 1_000_000_000_000


@pytest.fixture(scope="module")
def big():  # type: ignore[no-untyped-def]
    fabric = rail_optimized("scale", servers=704, gpus_per_server=8, spines=8)
    ports = build_port_index(fabric)
    return fabric, ports, Wiring(fabric, ports)


def test_the_bench_fabric_has_at_least_16384_ports(big) -> None:  # type: ignore[no-untyped-def]
    fabric, ports, wiring = big
    assert len(ports) >= 16_384
    assert (len(ports), len(fabric.switches), wiring.n_gpus) == (16_896, 184, 5_632)


def test_a_step_never_builds_an_n_gpus_squared_array_and_routes_groups_only(big) -> None:  # type: ignore[no-untyped-def]
    _, ports, wiring = big
    n = wiring.n_gpus
    dense_bytes = n * n * 8  # one float64 n_gpus² matrix: 254 MB
    tracemalloc.start()
    try:
        router = Router(wiring, "pxn", group_gpus=256)
        _, peak_router = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        job = MoeTraffic(MoeConfig(), n, seed=1)
        timeline = JobTimeline(job, router, ports.speed_bps, ports.host_facing, T0)
        timeline.ensure(T0 + 1)  # one training step: 8 layers, 16 phases routed
        _, peak_step = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (job.groups, job.group_gpus) == (22, 256)
    # PXN pairs: per group 32 servers x 256 destinations, less each server's own 8 GPUs
    assert len(router.pairs) == 22 * 32 * (256 - 8)
    assert peak_router < dense_bytes / 8
    assert peak_step < dense_bytes / 4  # a layer's blocks are 22 x 256² (11.5 MB), a few at a time
    lt = job.next_step()[0]
    assert lt.noise.shape == (256, 256) and lt.dispatch_blocks.shape == (22, 256, 256)
    # the hot expert is hot in every group: one hot port per SU, each on the same rail
    received = lt.dispatch_blocks.sum(axis=1)
    assert set(np.argmax(received, axis=1).tolist()) == {job.gpu_of_expert(lt.hot_expert)}


def test_what_the_twin_keeps_does_not_grow_with_run_length(big) -> None:  # type: ignore[no-untyped-def]
    _, ports, wiring = big
    router = Router(wiring, "pxn", group_gpus=256)
    timeline = JobTimeline(MoeTraffic(MoeConfig(), wiring.n_gpus, seed=2), router, ports.speed_bps,
                           ports.host_facing, T0)
    queues = FabricQueues(timeline, ports, peer_positions(wiring.link, len(ports)), T0)
    kept = []
    for k in range(1, 41):  # 4 s of simulated job at the twin's 10 Hz
        queues.advance_to(T0 + k * NS // 10)
        if k % 10 == 0:
            kept.append((len(timeline.phases), queues.history_bytes))
    phase_bytes = 3 * 8 * len(ports)
    # past min_keep_s (2 s) both stay near their byte bounds (min_keep_s of history wins over the
    # budget: ~150 MB of queue history here for 128 MB) and stop growing
    for phases, history in kept[2:]:
        assert phases * phase_bytes <= 2 * timeline.max_bytes
        assert history <= 2 * queues.max_bytes
    assert kept[-1][1] <= 1.3 * kept[-2][1]
    # a switch's read runs the closed forms for its own ports, not the fabric's
    sl = ports.slice_of("leaf-su3-r5")
    got = queues.counters_at(T0 + 3_950_000_000, sl)
    assert {len(v) for v in got.values()} == {sl.stop - sl.start}


def test_a_twin_behind_real_time_stalls_its_job_instead_of_owing_the_simulation(big) -> None:  # type: ignore[no-untyped-def]
    _, ports, wiring = big
    router = Router(wiring, "pxn", group_gpus=256)
    timeline = JobTimeline(MoeTraffic(MoeConfig(), wiring.n_gpus, seed=3), router, ports.speed_bps,
                           ports.host_facing, T0)
    timeline.max_lag_ns = 2 * NS
    timeline.ensure(T0 + 1)
    steps = timeline.traffic.step
    timeline.ensure(T0 + 60 * NS)  # a minute starved: not 160 steps to catch up, one
    assert timeline.traffic.step - steps <= 2
    assert timeline.stalled_ns >= 58 * NS  # ~all of it, counted (the twin's /status job_stalled_s)
    assert not [ph for ph in timeline.phases if T0 + NS < ph.start_ns < T0 + 59 * NS]  # idle meanwhile
