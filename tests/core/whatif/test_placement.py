"""Placement suggestion: a job whose heavy pairs sit on different hosts and rails is regrouped."""

from __future__ import annotations

import numpy as np
from topologies import four_leaf_two_spine

from fabricmon.core.phases.layout import FabricLayout, RankPlacement
from fabricmon.core.phases.routing import Routing
from fabricmon.core.topology.port_index import build_port_index
from fabricmon.core.whatif.placement import suggest


def test_pairs_split_across_hosts_are_brought_together() -> None:
    spec = four_leaf_two_spine(servers=4)  # 4 hosts x 4 GPUs
    layout = FabricLayout.from_spec(spec, build_port_index(spec))
    # ranks 0..15 on GPUs in order; rank r talks heavily with rank (r + 4) % 16 (next host, same
    # rail) and with rank r ^ 1 ... make pairs (r, r+5): different host *and* different rail
    t = np.zeros((16, 16))
    for r in range(0, 16, 2):
        t[r, (r + 5) % 16] = t[(r + 5) % 16, r] = 1e9
    out = suggest(layout, RankPlacement(np.arange(16)), t[None], Routing("ecmp"))
    assert out["suggest"] and out["ranks_moved"] > 0
    assert out["after"]["network_bytes"] < out["before"]["network_bytes"]
    assert out["after"]["peak_port_bytes"] <= out["before"]["peak_port_bytes"]
    assert sorted(out["gpu_of_rank"]) == list(range(16))  # a permutation of the run's GPUs


def test_uniform_traffic_needs_no_move() -> None:
    spec = four_leaf_two_spine(servers=4)
    layout = FabricLayout.from_spec(spec, build_port_index(spec))
    t = np.ones((16, 16)) * 1e6
    out = suggest(layout, RankPlacement(np.arange(16)), t[None], Routing("pxn"))
    assert not out["suggest"] and out["gpu_of_rank"] is None


def test_node_choice_counts_scalable_units_and_bytes_between_them() -> None:
    from fabricmon.core.topology.railgen import rail_optimized
    from fabricmon.core.whatif.placement import node_choice

    spec = rail_optimized("two-su", servers=8, gpus_per_server=2, spines=2, servers_per_su=4, uplinks_per_leaf=4)
    layout = FabricLayout.from_spec(spec, build_port_index(spec))
    # 4 ranks on hosts 2, 3 (SU 0) and 4, 5 (SU 1): a job that would fit in one SU spans two
    gpus = np.array([4, 5, 6, 7, 8, 9, 10, 11])
    t = np.ones((8, 8))
    np.fill_diagonal(t, 0)
    out = node_choice(layout, RankPlacement(gpus), t)
    assert (out["scalable_units"], out["run_hosts"], out["run_spans_sus"], out["fewest_sus"]) == (2, 4, 2, 1)
    assert out["cross_su_share"] == 32 / 56  # each rank: 4 of its 7 peers in the other SU
