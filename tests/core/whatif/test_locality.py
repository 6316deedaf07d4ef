"""mFabric's synthetic checks (mfabric_locality.md §4.4) on the locality metrics, the circuit greedy
and the cost panel."""

from __future__ import annotations

import numpy as np
import pytest

from fabricmon.core.whatif.locality import (
    drift,
    greedy_regions,
    intensity,
    locality,
    locality_curve,
    server_matrix,
    stability,
    symmetry,
)
from fabricmon.core.whatif.ocs import circuits, cost_ratio, phase_times, port_budget


def test_port_budget_80_to_250_servers() -> None:
    assert (port_budget(6), port_budget(2)) == (83, 250)


def test_dense_8_server_region_at_alpha_6_gets_24_circuits_every_server_degree_6() -> None:
    rng = np.random.default_rng(1)
    for _ in range(200):
        d = rng.random((8, 8)) + 0.01
        c = circuits(d, alpha=6)
        assert c.sum() // 2 == 24 and (c.sum(axis=1) == 6).all() and (c == c.T).all()


def test_uniform_4_server_region_gets_2_circuits_per_pair() -> None:
    c = circuits(np.ones((4, 4)) - np.eye(4), alpha=6)
    off = c[~np.eye(4, dtype=bool)]
    assert (off == 2).all() and (c.sum(axis=1) == 6).all()


def test_cost_ratios_from_table_4_prices() -> None:
    ratios = {g: round(cost_ratio(g, 6), 2) for g in (100, 200, 400, 800)}
    # this port-count model (3-tier fat-tree, 6 transceivers + 6 EPS ports + 3 fibers per host link)
    assert ratios == {100: 1.59, 200: 1.86, 400: 2.38, 800: 2.4}
    # the paper: 2.3× lower at 400G, 2.0× on average — both within ±0.1
    assert abs(ratios[400] - 2.3) <= 0.1 and abs(np.mean(list(ratios.values())) - 2.0) <= 0.1


def _megatron(dp: int = 2, ep: int = 4, gpus: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """DP × EP layout, Megatron order (EP groups contiguous), 1 server = ``gpus`` ranks, EP groups of
    ``ep`` servers; top-2 Zipf-skewed experts: traffic only inside an EP group."""
    rng = np.random.default_rng(seed)
    world = dp * ep * gpus
    group = np.arange(world) // (ep * gpus)
    pop = 1.0 / np.arange(1, ep * gpus + 1) ** 0.6
    t = np.zeros((world, world))
    for s in range(world):
        members = np.flatnonzero(group == group[s])
        t[s, members] = rng.multinomial(4096 * 2, pop / pop.sum()) * 7168
    return t, np.arange(world) // gpus, group[:: gpus]


def test_megatron_layout_ep_locality_is_1_and_greedy_recovers_the_ep_groups() -> None:
    t, server, ep_of_server = _megatron()
    s = server_matrix(t, server)
    assert locality(s, ep_of_server) == pytest.approx(1.0)
    regions = greedy_regions(s, k=4)
    assert len(set(regions.tolist())) == 2
    assert all(len(set(ep_of_server[regions == r].tolist())) == 1 for r in set(regions.tolist()))
    curve = locality_curve(s)
    assert curve["k95"] == 4 and curve["L"][curve["k"].index(4)] == pytest.approx(1.0)
    assert symmetry(t, t.T * 2.0) == pytest.approx(0.0)  # combine (BF16) retraces dispatch (FP8)
    assert symmetry(t, np.roll(t, 8, axis=1)) > 0.05


def test_decaying_skew_lowers_cv_and_drift() -> None:
    rng = np.random.default_rng(3)
    stacks, cvs = [], []
    for step in range(8):
        sigma = 1.0 / (1 + step)
        t = rng.lognormal(0, sigma, size=(32, 32)) * 1e6
        cvs.append(intensity(t)["cv"])
        stacks.append(server_matrix(t, np.arange(32) // 8))
    assert cvs[-1] < cvs[0]
    s = np.stack(stacks)[:, None]
    assert drift(s[-1, 0], s[-2, 0]) < drift(s[1, 0], s[0, 0])
    st = stability(s, circuits=3)
    assert st["hit_rate"]["uniform"] == 0.5 and st["drift_layer"] is None


def test_phase_times_prefers_circuits_for_concentrated_pairs() -> None:
    s = np.zeros((4, 4))
    s[0, 1] = s[1, 0] = 8e9
    s[2, 3] = s[3, 2] = 8e9
    t = phase_times(s, np.zeros(4, dtype=np.int64), alpha=6, link_bytes_s=50e9)
    assert t.on_circuits == 1.0 and t.mix_s < t.fat_tree_s * 1.5
    assert t.ocs_s == pytest.approx(8e9 / (6 * 50e9))  # each demanded pair takes all 6 ports of its ends


def test_batched_phase_times_equal_one_phase_at_a_time() -> None:
    from fabricmon.core.whatif.ocs import phase_times_all

    rng = np.random.default_rng(5)
    s = rng.random((6, 12, 12)) * 1e9
    s[:, :6, 6:] = s[:, 6:, :6] = 0.0
    for i in range(12):
        s[:, i, i] = 0.0
    regions = np.repeat([0, 1], 6)
    batch = phase_times_all(s, regions, alpha=4, link_bytes_s=50e9)
    for k in range(6):
        one = phase_times(s[k], regions, alpha=4, link_bytes_s=50e9)
        assert batch["mix_s"][k] == pytest.approx(one.mix_s) and batch["fat_tree_s"][k] == pytest.approx(one.fat_tree_s)
        assert batch["on_circuits"][k] == pytest.approx(one.on_circuits)
    static = phase_times_all(s, regions, alpha=4, link_bytes_s=50e9, fixed=s.sum(axis=0))
    fixed = np.zeros((12, 12), dtype=np.int64)
    for m in (np.arange(6), np.arange(6, 12)):
        fixed[np.ix_(m, m)] = circuits(s.sum(axis=0)[np.ix_(m, m)], alpha=4, link_bytes_s=50e9)
    one = phase_times(s[2], regions, alpha=4, link_bytes_s=50e9, fixed=fixed)  # one static topology
    assert static["mix_s"][2] == pytest.approx(one.mix_s)
