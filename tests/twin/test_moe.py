"""The MoE job model: seeded, popularity that drifts and jumps, combine = transpose of dispatch."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from twin.moe import MoeConfig, MoeTraffic


def test_same_seed_same_job_and_different_seed_different_job():
    a = MoeTraffic(MoeConfig(layers=2), 16, seed=5).next_step()
    b = MoeTraffic(MoeConfig(layers=2), 16, seed=5).next_step()
    c = MoeTraffic(MoeConfig(layers=2), 16, seed=6).next_step()
    np.testing.assert_array_equal(a[1].dispatch_bytes, b[1].dispatch_bytes)
    assert not np.array_equal(a[1].dispatch_bytes, c[1].dispatch_bytes)


def test_combine_is_transpose_of_dispatch_at_combine_element_size():
    lt = MoeTraffic(MoeConfig(layers=1), 8, seed=1).next_step()[0]
    np.testing.assert_allclose(lt.combine_bytes, lt.dispatch_bytes.T * 2.0)
    assert np.all(np.diag(lt.dispatch_bytes) == 0.0)
    assert lt.popularity.sum() == pytest.approx(1.0)


def test_hot_expert_receives_most_and_regime_shift_moves_it():
    cfg = MoeConfig(layers=2, regime_shift_prob=1.0)
    job = MoeTraffic(cfg, 32, seed=2)
    hot = []
    for _ in range(4):
        lt = job.next_step()[0]
        received = lt.dispatch_bytes.sum(axis=0)
        assert int(np.argmax(received)) == job.gpu_of_expert(lt.hot_expert)
        hot.append(lt.hot_expert)
    assert all(a != b for a, b in itertools.pairwise(hot))  # every step a jump


def test_without_regime_shift_the_hot_expert_stays_and_popularity_drifts():
    job = MoeTraffic(MoeConfig(layers=1, regime_shift_prob=0.0, rho=0.9), 32, seed=2)
    steps = [job.next_step()[0] for _ in range(3)]
    assert len({s.hot_expert for s in steps}) == 1
    assert not np.allclose(steps[0].popularity, steps[2].popularity)


def test_a_balanced_cycle_routes_uniformly_and_returns_with_a_new_hotspot():
    cfg = MoeConfig(layers=1, regime_shift_prob=0.0, gate_noise=0.0, skewed_steps=3, balanced_steps=2)
    job = MoeTraffic(cfg, 16, seed=4)
    steps = [job.next_step()[0] for _ in range(8)]
    assert [s.hot_expert < 0 for s in steps] == [False, False, False, True, True, False, False, False]
    for s in steps[3:5]:  # balanced: every GPU receives the same bytes, no hot GPU
        received = s.dispatch_bytes.sum(axis=0)
        np.testing.assert_allclose(received, received.mean())
        assert job.gpu_of_expert(s.hot_expert) == -1
    assert steps[5].hot_expert != steps[2].hot_expert  # back from balance somewhere else
    assert len({s.hot_expert for s in steps[:3]}) == len({s.hot_expert for s in steps[5:]}) == 1


def test_bad_config_is_a_clear_error():
    with pytest.raises(ValueError, match="rho"):
        MoeConfig(rho=1.5)
    with pytest.raises(ValueError, match="skewed_steps"):
        MoeConfig(balanced_steps=5)
    with pytest.raises(ValueError, match="at least 2 GPUs"):
        MoeTraffic(MoeConfig(), 1)


# -- expert-parallel groups ----------------------------------------------------------------------
# 32 GPUs in EP groups of 8: four 8 x 8 blocks on the diagonal, nothing between groups
#
#     ranks  0 … 7 │ 8 … 15 │ 16 … 23 │ 24 … 31
#            ■■■■  │        │         │
#                  │  ■■■■  │         │
#                  │        │  ■■■■   │
#                  │        │         │  ■■■■


def test_ep_groups_are_blocks_on_the_diagonal_with_one_popularity():
    job = MoeTraffic(MoeConfig(layers=2, ep_size=8), 32, seed=3)
    assert (job.groups, job.group_gpus, job.n_experts) == (4, 8, 8)
    for lt in job.next_step():
        blocks = lt.dispatch_blocks
        assert blocks.shape == (4, 8, 8) and lt.combine_blocks.shape == (4, 8, 8)
        dense = lt.dispatch_bytes
        inside = np.kron(np.eye(4, dtype=bool), np.ones((8, 8), dtype=bool))
        assert np.all(dense[~inside] == 0.0) and np.all(np.diag(dense) == 0.0)
        np.testing.assert_array_equal(dense[8:16, 8:16], blocks[1])
        np.testing.assert_allclose(lt.combine_bytes, dense.T * 2.0)
        # one gate for every group: the hot expert's GPU receives most in each group
        hot = job.gpu_of_expert(lt.hot_expert)
        assert [int(np.argmax(b.sum(axis=0))) for b in blocks] == [hot] * 4
        assert job.gpus_of_expert(lt.hot_expert) == [hot, 8 + hot, 16 + hot, 24 + hot]
        assert not np.array_equal(blocks[0], blocks[1])  # each group's tokens have their own noise


def test_one_group_is_the_whole_job_matrix():
    """ep_size ≥ the job's GPUs (the demo: 256 GPUs, ep 256) or 0: one block, the same draws."""
    a = MoeTraffic(MoeConfig(layers=2, ep_size=0), 16, seed=5).next_step()
    b = MoeTraffic(MoeConfig(layers=2), 16, seed=5).next_step()  # default ep_size 256 ≥ 16 GPUs
    assert a[1].dispatch_blocks.shape == (1, 16, 16)
    np.testing.assert_array_equal(a[1].dispatch_bytes, b[1].dispatch_bytes)
    np.testing.assert_array_equal(a[1].dispatch_blocks[0], a[1].dispatch_bytes)


def test_groups_that_do_not_split_the_gpus_are_refused():
    with pytest.raises(ValueError, match="do not split into expert-parallel groups of 8"):
        MoeTraffic(MoeConfig(ep_size=8), 20)
    with pytest.raises(ValueError, match="ep_size"):
        MoeConfig(ep_size=1)


def test_the_dense_view_is_for_small_fabrics_only():
    from twin.moe import DENSE_MAX_GPUS

    job = MoeTraffic(MoeConfig(layers=1, ep_size=64), 2 * DENSE_MAX_GPUS, seed=0)
    lt = job.next_step()[0]
    assert lt.dispatch_blocks.shape == (2 * DENSE_MAX_GPUS // 64, 64, 64)
    with pytest.raises(ValueError, match="not built"):
        _ = lt.dispatch_bytes


def test_server_sums_are_the_blocks_summed_per_server_without_building_them():
    """PXN reads what each server sends each GPU of its group: the closed form (prefix sums of
    the noise rows, one G x servers product) equals the blocks summed per server, except for a
    server's bytes to itself (which routing drops)."""
    job = MoeTraffic(MoeConfig(layers=3, ep_size=16), 64, seed=1)
    for lt in job.next_step():
        dispatch, combine = lt.blocks()
        sums = lt.server_sums(4)
        for blocks, closed in zip((dispatch, np.ascontiguousarray(combine)), sums, strict=True):
            summed = blocks.reshape(16, 4, 16).sum(axis=1)  # (groups x servers, G)
            own = (np.arange(16) % 4)[:, None] == (np.arange(16) // 4)[None, :]  # server → its GPUs
            np.testing.assert_allclose(closed[~own], summed[~own], rtol=1e-12)
    with pytest.raises(ValueError, match="do not divide"):
        lt.server_sums(3)
