"""The fast What-if path against the straightforward one it replaced (``whatif_reference``: the
code before issue 17), on runs small enough to compute both: every figure of the page equal.

    EP-group MoE run      16 servers × 4 GPUs (64 ranks), 2 spines, EP 16, 20 steps (window 16)
    fed as                dense float32 (the phase state's arrays), dense uint32 and sparse
                          (index, value) cells (the jobs store's forms)
    also                  ranks permuted over the GPUs (membership-product pass, host swaps),
                          receivers reporting less than senders (the received sums)

Bytes are integers and the window 16 steps, so every sum is exact in float64 and the two paths
must agree to float32 rounding (the reference folds in float32; sparse cells are summed in
float64): relative 1e-6. The 256-GPU run (ring 510 / tree 16) is the same check, marked slow.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from whatif_reference import ocs as ref_ocs
from whatif_reference import report as reference
from whatif_reference.terrace_run import row_bytes as ref_row_bytes

from fabricmon.core.phases.layout import FabricLayout, RankPlacement
from fabricmon.core.topology.port_index import build_port_index
from fabricmon.core.topology.railgen import rail_optimized
from fabricmon.core.whatif import ocs, report
from fabricmon.core.whatif.matrix_pass import Accumulator, SparseCells
from fabricmon.core.whatif.placement import same_group_bytes
from fabricmon.core.whatif.terrace_run import row_bytes

ROW = 7168


def _run(servers: int, gpus: int, ep: int, steps: int, seed: int = 0,  # type: ignore[no-untyped-def]
         drop_every: int = 0):
    """(key, dispatch-or-combine matrix, start_s, end_s): EP-block traffic, skewed and drifting
    (``drop_every``: every so many steps a few pairs send nothing, so the cells' pattern changes)."""
    rng = np.random.default_rng(seed)
    n = servers * gpus
    t = 0.0
    for step in range(steps):
        m = np.zeros((n, n), dtype=np.float32)
        for g in range(n // ep):
            sl = slice(g * ep, (g + 1) * ep)
            pop = rng.dirichlet(np.ones(ep) * 0.7)
            m[sl, sl] = np.rint(512 * pop[None, :] * rng.random((ep, ep)) + 1) * ROW
        np.fill_diagonal(m, 0.0)
        if drop_every and step % drop_every == 1:
            m[0, 1:5] = 0.0
            m[9, :3] = 0.0
        for phase, x in (("dispatch", m), ("combine", np.ascontiguousarray(m.T) * 2)):
            dur = 1e-3 + float(x.sum()) / n / 25e9
            yield (step, 0, phase), x, t, t + dur
            t += dur + 0.004
        t += 0.03


def _layout(servers: int, gpus: int, spines: int) -> FabricLayout:
    fab = rail_optimized("fast-path", servers=servers, gpus_per_server=gpus, spines=spines)
    return FabricLayout.from_spec(fab, build_port_index(fab))


def _form(m: np.ndarray, form: str) -> Any:
    if form == "uint32":
        return m.astype(np.uint32)
    if form == "sparse":
        idx = np.flatnonzero(m).astype(np.uint32)
        return SparseCells(len(m), idx, m.reshape(-1)[idx].astype(np.uint32))
    return m


def _figures(layout: FabricLayout, placement: RankPlacement, servers: int, gpus: int, ep: int, steps: int, *,
             form: str = "float32", recv_scale: float = 1.0,
             drop_every: int = 0) -> tuple[dict[str, Any], dict[str, Any]]:
    host = layout.gpu_host[placement.gpu_of_rank]
    used = np.unique(host)
    server_of_rank = np.searchsorted(used, host).astype(np.int64)
    window = set(range(steps - report.RANK_WINDOW_STEPS, steps))
    fast = Accumulator(server_of_rank, len(used), rank_steps=window, expected_keys=2 * steps)
    ref = reference.Accumulator(server_of_rank, len(used), rank_steps=window)
    for key, m, start, end in _run(servers, gpus, ep, steps, drop_every=drop_every):
        recv = np.floor(m * recv_scale) if recv_scale != 1.0 and key[2] == "dispatch" else None
        kw = {"event_bytes": float(m.sum(dtype=np.float64)), "start_s": start, "end_s": end}
        fast.add(key, _form(m, form), None if recv is None else _form(recv, form), **kw)
        ref.add(key, m, m if recv is None else recv, **kw)
    names = list(layout.index.port_names)
    common = {"link_gbs": 50.0, "ratio": 8.0, "measured": None, "port_names": names,
              "measured_sizes": {"allreduce": 1e8}}
    a = report.whatif(fast, layout, placement, report.Params(row_bytes=ROW), **common)
    b = reference.whatif(ref, layout, placement, reference.Params(row_bytes=ROW), **common)
    a.pop("seconds")
    b.pop("seconds")
    return a, b


def _differences(a: Any, b: Any, path: str = "", rtol: float = 1e-6) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{path}: keys {sorted(set(a) ^ set(b))}"]
        return [d for k in a for d in _differences(a[k], b[k], f"{path}.{k}", rtol)]
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items, not {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _differences(x, y, f"{path}[{i}]", rtol)]
    if isinstance(a, float) and isinstance(b, float | int) and not isinstance(b, bool):
        same = (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=rtol, abs_tol=1e-12)
        return [] if same else [f"{path}: {a!r} != {b!r}"]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


@pytest.mark.parametrize("form", ["float32", "uint32", "sparse"])
def test_every_figure_equals_the_reference_computation(form: str) -> None:
    layout = _layout(16, 4, 2)
    a, b = _figures(layout, RankPlacement(np.arange(64)), 16, 4, 16, 20, form=form)
    assert _differences(a, b) == []
    figs = {f["name"]: f for f in a["figures"]}
    assert {g["name"]: g["verdict"] for g in figs["hierarchy"]["gates"]}["byte_accounting"] == "pass"
    assert figs["optics"]["verdict"] == "show" and set(figs["routing"]["values"]["routings"]) >= {"pxn", "spray"}


def test_permuted_ranks_and_short_receivers_equal_the_reference() -> None:
    layout = _layout(16, 4, 2)
    gpus = np.random.default_rng(7).permutation(64)  # hosts not contiguous: the membership pass
    a, b = _figures(layout, RankPlacement(gpus), 16, 4, 16, 20, recv_scale=0.8)
    assert _differences(a, b) == []
    h = {f["name"]: f for f in a["figures"]}["hierarchy"]
    assert {g["name"]: g["verdict"] for g in h["gates"]}["byte_accounting"] == "withhold"
    assert "before" in {f["name"]: f for f in a["figures"]}["placement"]["values"]


@pytest.mark.slow
def test_256_gpus_equal_the_reference_and_keep_ring_510_tree_16() -> None:
    layout = _layout(32, 8, 4)
    a, b = _figures(layout, RankPlacement(np.arange(256)), 32, 8, 64, 18, form="sparse")
    assert _differences(a, b) == []
    c = {s["schedule"]: s for s in {f["name"]: f for f in a["figures"]}["collectives"]["values"]["schedules"]}
    assert c["allreduce ring (rank order)"]["steps"] == 510 and c["allreduce tree (double binary)"]["steps"] == 16


def test_dense_block_pass_and_sparse_cells_give_the_same_reductions() -> None:
    """The blocked dense pass (with zero server blocks skipped in the window sums), the sparse
    cells and the membership products agree; the window sums are exact."""
    rng = np.random.default_rng(3)
    n, g = 96, 8
    server = np.repeat(np.arange(n // g), g)
    mats = []
    for _ in range(5):
        m = np.zeros((n, n), dtype=np.float32)
        m[:48, :48] = rng.integers(0, 1 << 20, (48, 48))
        m[60:, 10:30] = rng.integers(0, 9, (36, 20))
        mats.append(m)
    dense = Accumulator(server, n // g)
    sparse = Accumulator(server, n // g)
    member = Accumulator(server, n // g)
    for i, m in enumerate(mats):
        idx = np.flatnonzero(m)
        dense.add((i, 0, "dispatch"), m)
        sparse.add((i, 0, "dispatch"), SparseCells(n, idx, m.reshape(-1)[idx]))
        member.add((i, 0, "dispatch"), np.asfortranarray(m))  # not C-contiguous: membership products
    exact = np.sum([m.astype(np.float64) for m in mats], axis=0)
    for acc in (dense, sparse, member):
        assert np.array_equal(acc.sums[(0, "dispatch")], exact)
        np.testing.assert_allclose(acc.server_stack(), dense.server_stack(), rtol=1e-6)
        np.testing.assert_allclose(acc.busiest_cross, dense.busiest_cross, rtol=1e-6)
        np.testing.assert_allclose(acc.server_sums[(0, "dispatch")], dense.server_stack().sum(axis=0), rtol=1e-9)


def test_vectorised_circuit_repair_equals_the_per_region_loop() -> None:
    rng = np.random.default_rng(11)
    for k, alpha in ((8, 6), (5, 3), (12, 4), (3, 6)):
        d = rng.random((40, k, k)) * (rng.random((40, k, k)) < 0.4) * 1e9
        sizes = rng.integers(2, k + 1, 40)
        pad = np.arange(k)[None, :] >= sizes[:, None]  # rows and columns past a region's servers
        d[pad[:, :, None] | pad[:, None, :]] = 0.0
        fast = ocs.circuits_batch(d, alpha, 50e9, servers=sizes)
        ref = ref_ocs.circuits_batch(d, alpha, 50e9, servers=sizes)
        assert np.array_equal(fast, ref)


def test_row_size_and_same_group_bytes_equal_the_plain_computations() -> None:
    rng = np.random.default_rng(5)
    for trial in range(60):
        n = int(rng.integers(1, 40))
        base = int(rng.choice([1, 3, 64, 7168]))
        m = (rng.integers(0, 30, (n, n)) * base * rng.choice([1, 2, 5], (n, n))).astype(np.float64)
        if trial % 4 == 0:
            m[0, 0] = base * 7 + 1
        assert row_bytes(m) == ref_row_bytes(m)
        for raw in (np.arange(n) // 4, rng.integers(0, 5, n), np.zeros(n, np.int64)):
            group = np.unique(raw, return_inverse=True)[1].reshape(-1).astype(np.int64)
            same = group[:, None] == group[None, :]
            assert same_group_bytes(m, group) == pytest.approx(float(m[same].sum()), rel=1e-12)
