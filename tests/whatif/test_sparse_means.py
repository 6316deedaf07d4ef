"""The sparse forms the fast path keeps (issue 17, second round) against the dense arrays they
stand for: a window mean as a CSR array of its cells, server matrices as cells, PXN projections
folded from cells, and the pattern plans of the pass when the pattern changes or receivers differ.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_fast_path import _differences, _figures, _layout

from fabricmon.core.phases.layout import RankPlacement
from fabricmon.core.phases.projector import Projector
from fabricmon.core.phases.routing import Routing
from fabricmon.core.whatif import locality as loc
from fabricmon.core.whatif import rank_matrix as rm
from fabricmon.core.whatif.matrix_pass import Accumulator, SparseCells
from fabricmon.core.whatif.placement import host_swaps, rail_slots, same_group_bytes
from fabricmon.core.whatif.report import _Grid
from fabricmon.core.whatif.server_cells import ServerCells
from fabricmon.core.whatif.terrace_run import by_group_columns, by_group_rows


def _sparse(rng: np.random.Generator, n: int, share: float) -> np.ndarray:
    return np.rint(rng.random((n, n)) * 1e6) * (rng.random((n, n)) < share)


@pytest.mark.parametrize("recv_scale", [1.0, 0.8])
@pytest.mark.parametrize("drop_every", [0, 3])
def test_sparse_cells_whose_pattern_changes_equal_the_reference(drop_every: int, recv_scale: float) -> None:
    """Contiguous hosts (the plan path): a pattern that changes every few steps (the pending sum
    goes dense) and receivers that report less (the received sums) give the reference's figures."""
    layout = _layout(16, 4, 2)
    a, b = _figures(layout, RankPlacement(np.arange(64)), 16, 4, 16, 20, form="sparse",
                    recv_scale=recv_scale, drop_every=drop_every)
    assert _differences(a, b) == []


def test_pending_pattern_sums_and_means_are_the_dense_ones() -> None:
    rng = np.random.default_rng(4)
    n, g = 32, 4
    server = np.repeat(np.arange(n // g), g)
    base = _sparse(rng, n, 0.2)
    mats = [base * (1 + i) for i in range(4)] + [_sparse(rng, n, 0.2)]  # same pattern, then another
    acc = Accumulator(server, n // g)
    for i, m in enumerate(mats):
        idx = np.flatnonzero(m).astype(np.uint32)
        acc.add((i, 0, "dispatch"), SparseCells(n, idx, m.reshape(-1)[idx].astype(np.uint32)))
        if i == 3:  # four steps of one pattern: kept as its cells, the mean a CSR array
            mean = acc.mean((0, "dispatch"))
            assert rm.is_sparse(mean)
            assert np.array_equal(rm.dense(mean), np.sum(mats[:4], axis=0) / 4)
    assert np.array_equal(acc.sums[(0, "dispatch")], np.sum(mats, axis=0))
    assert not rm.is_sparse(acc.mean((0, "dispatch")))  # the pattern changed: dense from then on
    np.testing.assert_array_equal(acc.server_stack().sum(axis=0), acc.server_sums[(0, "dispatch")])


def test_rank_matrix_reads_equal_the_dense_ones() -> None:
    rng = np.random.default_rng(8)
    n = 48
    t = _sparse(rng, n, 0.15) / 16
    s = rm.csr(n, np.flatnonzero(t), t.reshape(-1)[np.flatnonzero(t)])
    hosts = np.repeat(np.arange(12), 4)
    rails = np.tile(np.arange(4), 12)
    odd = rng.integers(0, 7, n)
    for group in (hosts, rails, odd):
        assert np.array_equal(by_group_columns(s, group), by_group_columns(t, group))
        k = int(group.max()) + 1
        assert np.array_equal(by_group_rows(s, group, k), by_group_rows(t, group, k))
        assert same_group_bytes(s, group) == same_group_bytes(t, group)
    rows, cols = rng.integers(0, n, 200), rng.integers(0, n, 200)
    assert np.array_equal(rm.gather(s, rows, cols), t[rows, cols])
    assert np.array_equal(host_swaps(s, hosts), host_swaps(t, hosts))
    slots = {h: list(range(4 * h, 4 * h + 4)) for h in range(12)}
    assert np.array_equal(rail_slots(s, hosts, slots, rails), rail_slots(t, hosts, slots, rails))


@pytest.mark.parametrize("permuted", [False, True])
def test_pxn_projection_folded_from_cells_equals_the_dense_projection(permuted: bool) -> None:
    layout = _layout(16, 4, 2)
    n = layout.n_gpus
    gpus = np.random.default_rng(2).permutation(n) if permuted else np.arange(n)
    proj = Projector(layout, RankPlacement(gpus), Routing("pxn"))
    t = _sparse(np.random.default_rng(5), n, 0.1)
    s = rm.csr(n, np.flatnonzero(t), t.reshape(-1)[np.flatnonzero(t)])
    np.testing.assert_allclose(rm.project_load(proj, s), proj.project(t).load_bytes, rtol=1e-12)
    ecmp = Projector(layout, RankPlacement(gpus), Routing("ecmp", 1))
    np.testing.assert_array_equal(rm.project_load(ecmp, s), ecmp.project(t).load_bytes)


def test_stability_from_cells_equals_the_dense_stack_even_with_tied_pairs() -> None:
    rng = np.random.default_rng(6)
    steps, n = 6, 10
    stack = np.stack([_sparse(rng, n, 0.3) for _ in range(steps)])
    stack[2] = np.triu(np.where(stack[2] > 0, 5.0, 0.0), 1)  # every pair of step 2 tied: the dense fallback
    idx = np.arange(n)
    stack[:, idx, idx] = 0.0
    cells = ServerCells(n)
    for s in stack:
        cells.append(s)
    grid = _Grid(cells, np.arange(steps).reshape(steps, 1), n)
    for k in (3, 7, 200):
        assert loc.stability(grid, k) == loc.stability(stack[:, None], k)
    tied = loc._top_of(loc._pair_values(stack[2]), 3)  # the dense partition's pick among the ties
    assert len(tied) == 3 and loc._top_of_cells(*cells.cells(2), n, 3) == tied
