"""Projection onto ports against the twin's own routing (same hash model, same fabric)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from projection_twin_runs import poll_edges, recording

from fabricmon.core.phases.intervals import interval_bytes
from fabricmon.core.phases.layout import FabricLayout, RankPlacement, place_ranks
from fabricmon.core.phases.projector import Projector, ProjectorCache
from fabricmon.core.phases.routing import Routing
from fabricmon.core.topology.port_index import build_port_index
from fabricmon.core.topology.railgen import rail_optimized
from twin.routing import Router, Wiring


def _fabric(servers: int, per_su: int):  # type: ignore[no-untyped-def]
    fab = rail_optimized("p", servers=servers, gpus_per_server=4, spines=2, servers_per_su=per_su, uplinks_per_leaf=4)
    idx = build_port_index(fab)
    return fab, idx, FabricLayout.from_spec(fab, idx)


@pytest.mark.parametrize("mode", ["pxn", "ecmp"])
@pytest.mark.parametrize(("servers", "per_su"), [(8, 8), (16, 4)])  # one SU, and 4 SUs (PXN climbs to spines)
def test_matches_twin_routing_exactly(mode: str, servers: int, per_su: int) -> None:
    fab, idx, layout = _fabric(servers, per_su)
    router = Router(Wiring(fab, idx), mode, seed=7)  # type: ignore[arg-type]
    proj = Projector(layout, RankPlacement(np.arange(layout.n_gpus)), Routing(mode, seed=7))  # type: ignore[arg-type]
    m = np.random.default_rng(3).random((layout.n_gpus, layout.n_gpus)) * 1e8
    want, got = router.route(m), proj.project(m)
    np.testing.assert_allclose(got.in_bytes, want.in_bytes, rtol=1e-9, atol=1e-3)
    np.testing.assert_allclose(got.out_bytes, want.out_bytes, rtol=1e-9, atol=1e-3)


def test_a_different_ecmp_seed_is_a_different_routing() -> None:
    _fab, _idx, layout = _fabric(16, 4)
    m = np.random.default_rng(1).random((layout.n_gpus, layout.n_gpus))
    a = Projector(layout, RankPlacement(np.arange(layout.n_gpus)), Routing("ecmp", 1)).project(m)
    b = Projector(layout, RankPlacement(np.arange(layout.n_gpus)), Routing("ecmp", 2)).project(m)
    assert not np.allclose(a.out_bytes, b.out_bytes)
    assert a.out_bytes.sum() == pytest.approx(b.out_bytes.sum())


def test_spray_conserves_bytes_and_balances_uplinks() -> None:
    _fab, _idx, layout = _fabric(16, 4)
    n = layout.n_gpus
    m = np.random.default_rng(2).random((n, n))
    place = RankPlacement(np.arange(n))
    spray = Projector(layout, place, Routing("spray")).project(m)
    ecmp = Projector(layout, place, Routing("ecmp")).project(m)
    assert spray.in_bytes.sum() == pytest.approx(ecmp.in_bytes.sum())
    assert spray.out_bytes.sum() == pytest.approx(ecmp.out_bytes.sum())
    up = layout.link[:, 1]  # leaf end of every uplink: out = bytes climbing
    leaf0 = layout.link[:, 0] == 0
    assert spray.out_bytes[up[leaf0]].std() < 1e-9 * spray.out_bytes[up[leaf0]].mean() + 1e-12
    assert ecmp.out_bytes[up[leaf0]].std() > spray.out_bytes[up[leaf0]].std()


@pytest.mark.parametrize(("servers", "per_su"), [(8, 8), (16, 4)])
def test_permuted_rank_map_moves_the_bytes_with_the_ranks(servers: int, per_su: int) -> None:
    """A shuffled rank map has no block structure (the proxy ports come from the sparse matrix);
    the identity map has (a reshape-sum): both paths must agree."""
    _fab, _idx, layout = _fabric(servers, per_su)
    n = layout.n_gpus
    perm = np.random.default_rng(4).permutation(n)  # rank r runs on GPU perm[r]
    m = np.random.default_rng(5).random((n, n))
    by_rank = Projector(layout, RankPlacement(perm), Routing("pxn")).project(m)
    gpu_m = np.zeros_like(m)
    gpu_m[np.ix_(perm, perm)] = m
    by_gpu = Projector(layout, RankPlacement(np.arange(n)), Routing("pxn")).project(gpu_m)
    np.testing.assert_allclose(by_rank.out_bytes, by_gpu.out_bytes, rtol=1e-12)


def test_place_ranks_reports_unplaceable_entries_and_keeps_the_rest() -> None:
    rec = recording()
    layout = FabricLayout.from_spec(rec.fabric, rec.ports)
    entries = [*rec.rank_map()[:4], {"rank": 4, "host": "nowhere", "switch": "x", "switch_port": "y"}, {"rank": 99}]
    place = place_ranks(layout, entries, rec.world_size)
    assert place.coverage == pytest.approx(4 / rec.world_size)
    assert len(place.problems) == 2 and "rank 4" in place.problems[0] and "99" in place.problems[1]


def test_twin_job_projected_per_port_per_phase_within_1_percent() -> None:
    """The must-show: projected per-port, per-phase bytes of the twin's job vs the twin's truth."""
    rec = recording()
    layout = FabricLayout.from_spec(rec.fabric, rec.ports)
    proj = ProjectorCache().get(layout, place_ranks(layout, rec.rank_map(), rec.world_size), Routing("pxn"))
    pb = proj.project(np.stack([p.matrix for p in rec.phases]))
    truth_in = np.stack([p.in_bytes for p in rec.phases])
    truth_out = np.stack([p.out_bytes for p in rec.phases])
    assert len(rec.phases) >= 50 * 16
    err = np.abs(pb.out_bytes - truth_out).max(axis=1) / truth_out.max(axis=1)
    assert err.max() < 0.01
    np.testing.assert_allclose(pb.in_bytes, truth_in, rtol=0.01, atol=1e-6 * truth_in.max())
    # float32 matrices (half the bytes to read; what the phases app builds) give the same answer
    pb32 = proj.project(np.stack([p.matrix for p in rec.phases]).astype(np.float32))
    np.testing.assert_allclose(pb32.out_bytes, pb.out_bytes, rtol=1e-5, atol=1e-6 * truth_out.max())


def test_cache_returns_the_same_projector_for_the_same_rank_map_and_routing() -> None:
    rec = recording()
    layout = FabricLayout.from_spec(rec.fabric, rec.ports)
    cache = ProjectorCache()
    place = place_ranks(layout, rec.rank_map(), rec.world_size)
    a = cache.get(layout, place, Routing("pxn"))
    assert cache.get(layout, place_ranks(layout, rec.rank_map(), rec.world_size), Routing("pxn")) is a
    assert cache.get(layout, place, Routing("ecmp")) is not a


def test_interval_bytes_reproduces_the_twins_counters() -> None:
    rec = recording()
    edges = poll_edges(rec)
    k = np.stack([p.out_bytes for p in rec.phases])
    got = interval_bytes(np.array([p.start_ns for p in rec.phases]), np.array([p.end_ns for p in rec.phases]), k, edges)
    want = np.array([rec.window_bytes(int(a), int(b))[1] for a, b in itertools.pairwise(edges)])
    np.testing.assert_allclose(got, want, rtol=1e-5)  # ns as float64 near 1.8e18: ~256 ns grain


def test_wrong_matrix_shape_is_a_clear_error() -> None:
    _, _, layout = _fabric(8, 8)
    proj = Projector(layout, RankPlacement(np.arange(layout.n_gpus)), Routing("pxn"))
    with pytest.raises(ValueError, match="does not match the rank map's world"):
        proj.project(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="routing mode"):
        Routing("bogus")  # type: ignore[arg-type]
