"""Collective schedules: the step counts of fabric_model.md §2 and where each puts its bytes on
``one_su_256_gpus`` (32 servers × 8 GPUs, 8 rail leaves, 4 spines)."""

from __future__ import annotations

import numpy as np
import pytest
from topologies import four_leaf_two_spine, one_su_256_gpus

from fabricmon.core.phases.layout import FabricLayout, RankPlacement
from fabricmon.core.phases.projector import Projector
from fabricmon.core.phases.routing import Routing
from fabricmon.core.topology.port_index import build_port_index
from fabricmon.core.whatif.collectives import (
    collectives_figure_values,
    hierarchical_alltoall,
    ranks_of,
    ring_steps,
    tree_steps,
)


def _projector(spec, mode: str = "ecmp") -> Projector:  # type: ignore[no-untyped-def]
    layout = FabricLayout.from_spec(spec, build_port_index(spec))
    return Projector(layout, RankPlacement(np.arange(layout.n_gpus)), Routing(mode))  # type: ignore[arg-type]


@pytest.mark.parametrize(("n", "ring", "tree"), [(8, 14, 6), (64, 126, 12), (256, 510, 16), (1024, 2046, 20)])
def test_step_counts(n: int, ring: int, tree: int) -> None:
    assert (ring_steps(n), tree_steps(n)) == (ring, tree)


def test_256_gpus_ring_510_tree_16_and_rail_aligned_rings_never_touch_a_spine() -> None:
    proj = _projector(one_su_256_gpus())
    names = list(proj.layout.index.port_names)
    v = collectives_figure_values(proj, None, {}, names)
    by = {r["schedule"]: r for r in v["schedules"]}
    assert by["allreduce ring (rank order)"]["steps"] == 510 and by["allreduce tree (double binary)"]["steps"] == 16
    assert v["reference_steps_256"] == {"ring": 510, "tree": 16}
    # under ECMP the rank-order ring's host boundary (GPU 7 → next host's GPU 0) crosses rails via a spine
    assert by["allreduce ring (rank order)"]["uplink_bytes"] > 0
    assert by["allreduce ring (rail-aligned)"]["uplink_bytes"] == 0
    # each NIC of the rail-aligned ring carries 2(N−1)/N·S / 8 leaving and the same arriving
    assert by["allreduce ring (rail-aligned)"]["peak_bytes"] == pytest.approx(2 * 255 / 256 / 8)
    assert by["allreduce tree (double binary)"]["uplink_bytes"] == 0  # trees on rails 0 and 1


def test_hierarchical_alltoall_keeps_cross_host_bytes_on_rail() -> None:
    proj = _projector(four_leaf_two_spine(servers=4))
    ranks = ranks_of(proj)
    traffic = np.ones((16, 16)) * 1000.0
    np.fill_diagonal(traffic, 0)
    inter, nvlink = hierarchical_alltoall(ranks, traffic)
    assert inter.sum() == pytest.approx(traffic[ranks.host[:, None] != ranks.host[None, :]].sum())
    assert (inter[ranks.local[:, None] != ranks.local[None, :]] == 0).all()  # only same-index pairs
    assert nvlink > 0
    v = collectives_figure_values(proj, traffic, {}, list(proj.layout.index.port_names))
    by = {r["schedule"]: r for r in v["schedules"]}
    assert by["alltoall hierarchical"]["uplink_bytes"] == 0 < by["alltoall direct"]["uplink_bytes"]
