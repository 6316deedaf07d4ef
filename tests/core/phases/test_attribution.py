"""Attribution of 1 s polls to (layer, phase) on the twin's job with known ground truth."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from projection_twin_runs import measured, poll_edges, recording, timeline_of
from scipy.optimize import nnls

from fabricmon.core.phases.attribution_fit import AttributionSums, attribute, lstsq_start, nnls_gram
from fabricmon.core.phases.gates import PRIOR_REL_ERROR_FLOOR
from fabricmon.core.phases.layout import FabricLayout, place_ranks
from fabricmon.core.phases.live_attribution import LiveAttribution
from fabricmon.core.phases.projector import Projector
from fabricmon.core.phases.routing import Routing
from fabricmon.core.phases.timeline import PhaseTimeline, design_rows, occupancy


def _truth(rec, edges):  # type: ignore[no-untyped-def]
    """Per (layer, phase) and port: the busier direction of the mean in / out bytes per instance
    over the phases inside the polled window — what in and out counters can see. (The mean of
    each instance's max(in, out) is not a function of the counters: a port whose busier direction
    flips as the hotspot moves reads up to 15 % above it, so even the exact projection missed it.)"""
    tl = timeline_of(rec)
    k_n, p_n = len(tl.keys), len(rec.ports)
    t_in, t_out, cnt = np.zeros((k_n, p_n)), np.zeros((k_n, p_n)), np.zeros(k_n)
    steps = set()
    for ph, k in zip(rec.phases, tl.key, strict=True):
        if ph.start_ns >= edges[0] and ph.end_ns <= edges[-1]:
            t_in[k] += ph.in_bytes
            t_out[k] += ph.out_bytes
            cnt[k] += 1
            steps.add(ph.step)
    return np.maximum(t_in, t_out) / cnt[:, None], len(steps)


def _projected_per_key(rec, tl):  # type: ignore[no-untyped-def]
    """Mean projected (in | out) bytes per instance of each (layer, phase): the prior."""
    layout = FabricLayout.from_spec(rec.fabric, rec.ports)
    proj = Projector(layout, place_ranks(layout, rec.rank_map(), rec.world_size), Routing("pxn"))
    pb = proj.project(np.stack([p.matrix for p in rec.phases]))
    prior, count = np.zeros((len(tl.keys), 2 * len(rec.ports))), np.zeros(len(tl.keys))
    np.add.at(prior, tl.key, np.hstack([pb.in_bytes, pb.out_bytes]))
    np.add.at(count, tl.key, 1)
    return prior / count[:, None]


TIE = 0.01  # the attributed hot port is right when it carries ≥ 99 % of the true top port's bytes


def _score(seeds):  # type: ignore[no-untyped-def]
    """Pooled over runs: [right, cells, exact, claimed, claimed right, tied set holds a top port]
    per estimator, and the true leads (top over runner-up) of dispatch and combine cells."""
    score = {"alone": np.zeros(6, dtype=int), "prior": np.zeros(6, dtype=int)}
    leads: dict[str, list[float]] = {"dispatch": [], "combine": []}
    median_se_alone = []
    for seed in seeds:
        rec = recording(seed=seed)
        edges = poll_edges(rec, 1.0)
        m_in, m_out = measured(rec, edges)
        tl = timeline_of(rec)
        truth, steps = _truth(rec, edges)
        assert steps >= 50
        top = truth.max(axis=1)
        srt = np.sort(truth, axis=1)
        for k, key in enumerate(tl.keys):  # dispatch: top over runner-up; combine: top over 4th
            leads[key[1]].append(srt[k, -1] / srt[k, -2 if key[1] == "dispatch" else -4] - 1.0)
        p = len(rec.ports)
        prior = _projected_per_key(rec, tl)
        for name, kw in (("alone", {}), ("prior", {"prior": prior, "prior_rel_error": PRIOR_REL_ERROR_FLOOR})):
            att = attribute(tl, edges, np.hstack([m_in, m_out]), **kw)
            assert att.residual_rel < 0.3
            hot = att.hot_ports(p)
            rows = np.arange(len(tl.keys))
            right = truth[rows, hot.port] >= (1 - TIE) * top
            tied_ok = ((truth >= (1 - TIE) * top[:, None]) & hot.tied).any(axis=1)
            score[name] += [right.sum(), len(right), (hot.port == truth.argmax(axis=1)).sum(),
                            hot.claimed.sum(), (right & hot.claimed).sum(), tied_ok.sum()]
            if name == "alone":
                median_se_alone.append(float(np.median(hot.lead_se_rel)))
    return score, {k: np.array(v) for k, v in leads.items()}, np.array(median_se_alone)


@pytest.mark.slow
@pytest.mark.parametrize(("seeds", "alone_min", "prior_min"), [
    (range(6), 0.80, 0.95),  # the seeds the knobs were chosen on
    (range(10, 16), 0.68, 0.95),  # held out
])
def test_hot_port_of_each_layer_phase_with_1s_polls_over_50_steps(seeds, alone_min, prior_min) -> None:  # type: ignore[no-untyped-def]
    """Six seeded twin runs of ~110 steps, 1 s polls: the attributed hot port of each of the
    96 (layer, phase) cells against the twin's truth, every cell scored.

    Scoring: right when the attributed port's true bytes are ≥ 99 % of the true top port's. The
    tolerance is physical: under PXN the hot expert's combine leaves its host through all four
    NICs (NVLink to the rail's GPU first), so the four ports of the hot host carry the same bytes
    to within 0.6 % (asserted) — any of them is the hot port. It is small against what must be
    resolved: dispatch cells' top port leads the runner-up by a median ≥ 10 % (asserted).

    Figures (2026-11-30; seeds 0-5 | held-out 10-15), right within 1 % / exact top:
      counters alone (NNLS, shrink=1): 79/96 = 82 % | 68/96 = 71 %; exact 49 | 44
      counters + projection prior (±1 %): 96/96 = 100 % | 94/96 = 98 %; claimed 44 | 43, all right
    Counters alone cannot do it, and say so: the occupancy of 1 s polls over 16 phases of a
    350 ms step has singular values 4.0 … 0.003, so a split between phases carries a standard
    error of ~40 times the phase's bytes (median lead SE asserted > 5 times) and no cell is claimed; their
    argmax is the shrink ridge's — the step's hot port. The two held-out misses with the prior are
    near-ties (the pick carries 98.6 % and 98.8 % of the top's bytes), and neither is claimed."""
    score, leads, median_se_alone = _score(seeds)
    assert leads["combine"].max() < 0.006  # combine: the hot host's four ports tie
    assert np.median(leads["dispatch"]) >= 0.10  # the tolerance is small against dispatch leads
    alone, prior = score["alone"], score["prior"]
    assert alone[0] / alone[1] >= alone_min, alone
    assert alone[3] == 0 and median_se_alone.min() > 5.0, (alone, median_se_alone)
    assert prior[0] / prior[1] >= prior_min, prior
    assert prior[3] >= 30 and prior[4] == prior[3], prior  # claimed hot ports: all right
    assert prior[5] == prior[1], prior  # where ambiguous, the tied set holds a true top port


def test_claims_stay_right_when_the_prior_is_off_by_its_stated_error() -> None:
    """The projection with 5 % random error per (phase, port), stated as 5 %: fewer cells are
    claimed (the cost of a worse prior), and every claim is still right. (2026-11-30: 28 claimed,
    28 right; 89/96 right within 1 % overall, the prior alone 89/96 — 1 s counters add the step
    totals, not the split.)"""
    rng = np.random.default_rng(7)
    claimed = claimed_right = 0
    for seed in range(6):
        rec = recording(seed=seed)
        edges = poll_edges(rec, 1.0)
        m_in, m_out = measured(rec, edges)
        tl = timeline_of(rec)
        truth, _ = _truth(rec, edges)
        prior = _projected_per_key(rec, tl)
        noisy = np.clip(prior * (1 + 0.05 * rng.standard_normal(prior.shape)), 0.0, None)
        hot = attribute(tl, edges, np.hstack([m_in, m_out]), prior=noisy, prior_rel_error=0.05).hot_ports(len(rec.ports))
        right = truth[np.arange(len(tl.keys)), hot.port] >= (1 - TIE) * truth.max(axis=1)
        claimed += int(hot.claimed.sum())
        claimed_right += int((right & hot.claimed).sum())
    assert claimed >= 15 and claimed_right == claimed, (claimed, claimed_right)


def test_hot_ports_claims_only_separable_cells() -> None:
    """Exact model with a clear winner in phase 0 and a tie in phase 1: claimed, and ambiguous
    with both tied ports named."""
    rec = recording()
    tl = timeline_of(rec)
    rng = np.random.default_rng(2)
    x = rng.random((len(tl.keys), 6)) * 1e8
    x[0, 3] = 5e9
    x[1, 1] = x[1, 4] = 4e9
    edges = poll_edges(rec, 0.25)
    m = occupancy(tl, edges) @ x * (1 + 0.01 * rng.standard_normal((len(edges) - 1, 6)))
    hot = attribute(tl, edges, m, shrink=0.0).hot_ports()
    assert hot.claimed[0] and hot.port[0] == 3
    assert not hot.claimed[1] and set(np.flatnonzero(hot.tied[1])) == {1, 4}
    d = hot.as_dict()
    assert d["port"][0] == 3 and d["port"][1] is None and sorted(d["tied"][1]) == [1, 4]
    assert d["lead_se_rel"][1] is not None and d["lead_rel"][1] < 2 * d["lead_se_rel"][1]


def test_exact_model_is_recovered_and_residual_is_zero() -> None:
    """When every instance of a phase puts the same bytes on every port, NNLS finds them exactly."""
    rec = recording()
    tl = timeline_of(rec)
    rng = np.random.default_rng(0)
    x_true = rng.random((len(tl.keys), 5)) * 1e9
    edges = poll_edges(rec, 0.25)
    m = occupancy(tl, edges) @ x_true
    att = attribute(tl, edges, m, shrink=0.0)
    np.testing.assert_allclose(att.bytes_per_phase, x_true, rtol=2e-3)
    assert att.residual_rel < 1e-6


@pytest.mark.parametrize("start", ["least_squares", "zeros"])
def test_shared_nnls_matches_scipy_per_column(start: str) -> None:
    """FISTA on the shared Gram matrix (what AttributionSums.solve runs), from the clipped
    least-squares start it uses and from zero, reaches scipy's per-column NNLS optimum."""
    rng = np.random.default_rng(1)
    a = rng.random((60, 8))
    m = a @ np.clip(rng.standard_normal((8, 30)), 0, None) + 0.3 * rng.standard_normal((60, 30))
    g, b = a.T @ a, a.T @ m
    x0 = lstsq_start(g, b) if start == "least_squares" else np.zeros_like(b)
    got = nnls_gram(g, b, x0, iterations=20000, tol=1e-14)
    assert (got >= 0).all()
    for c in range(m.shape[1]):
        want, _ = nnls(a, m[:, c])
        assert np.linalg.norm(a @ got[:, c] - m[:, c]) <= np.linalg.norm(a @ want - m[:, c]) * (1 + 1e-6) + 1e-9


def test_occupancy_splits_a_phase_across_a_poll_edge() -> None:
    tl = PhaseTimeline.from_events([(0, 0, "dispatch", 900, 1100), (0, 0, "combine", 1200, 1300), (1, 0, "dispatch", 100, 3100)])
    occ = occupancy(tl, np.array([0, 1000, 2000, 3000]))
    np.testing.assert_allclose(occ[:, tl.keys.index((0, "dispatch"))], [0.5 + 0.3, 0.5 + 1 / 3, 1 / 3])
    np.testing.assert_allclose(occ[:, tl.keys.index((0, "combine"))], [0, 1, 0])


def test_failed_polls_are_dropped_not_filled() -> None:
    rec = recording()
    edges = poll_edges(rec, 1.0)
    m_in, m_out = measured(rec, edges)
    m = np.hstack([m_in, m_out])
    m[3] = np.nan
    att = attribute(timeline_of(rec), edges, m)
    assert att.intervals == len(edges) - 2 and np.isfinite(att.bytes_per_phase).all()
    with pytest.raises(ValueError, match="do not match"):
        attribute(timeline_of(rec), edges[:-1], m)


def test_without_counters_nothing_is_claimed_and_the_prior_keeps_its_error() -> None:
    rec = recording()
    edges = poll_edges(rec, 1.0)
    tl = timeline_of(rec)
    m = np.full((len(edges) - 1, 2 * len(rec.ports)), np.nan)
    alone = attribute(tl, edges, m)
    assert alone.intervals == 0 and not alone.hot_ports(len(rec.ports)).claimed.any()
    prior = _projected_per_key(rec, tl)
    att = attribute(tl, edges, m, prior=prior, prior_rel_error=0.05)
    np.testing.assert_allclose(att.bytes_per_phase, prior)
    assert att.se_bytes is not None
    top = prior.argmax(axis=1)
    np.testing.assert_allclose(att.se_bytes[np.arange(len(top)), top], 0.05 * prior.max(axis=1))


def _same(got, want, *, se_rtol: float = 1e-9) -> None:  # type: ignore[no-untyped-def]
    """Two attributions of the same data agree to rounding (summation order only)."""
    scale = np.abs(want.bytes_per_phase).max()
    np.testing.assert_allclose(got.bytes_per_phase, want.bytes_per_phase, rtol=0, atol=1e-9 * scale)
    np.testing.assert_allclose(got.residual_rel_per_column, want.residual_rel_per_column, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got.residual_std, want.residual_std, rtol=1e-9)
    fin = np.isfinite(want.se_bytes)
    assert (fin == np.isfinite(got.se_bytes)).all()
    np.testing.assert_allclose(got.se_bytes[fin], want.se_bytes[fin], rtol=0, atol=se_rtol * want.se_bytes[fin].max())
    assert abs(got.residual_rel - want.residual_rel) < 1e-12
    assert (got.keys, got.intervals, got.rank, got.prior_used) == (want.keys, want.intervals, want.rank, want.prior_used)
    assert got.condition == pytest.approx(want.condition, rel=1e-6)
    p = got.bytes_per_phase.shape[1] // 2
    a, b = got.hot_ports(p), want.hot_ports(p)
    assert (a.port == b.port).all() and (a.claimed == b.claimed).all()


def _twin(seed: int = 0):  # type: ignore[no-untyped-def]
    rec = recording(seed=seed)
    edges = poll_edges(rec, 1.0)
    m_in, m_out = measured(rec, edges)
    m = np.hstack([m_in, m_out])
    m[[4, 17]] = np.nan  # two failed polls
    return rec, edges, m


@pytest.mark.parametrize("kind", ["alone", "prior", "background"])
def test_sums_fed_in_chunks_equal_attribute(kind: str) -> None:
    """The accumulator, fed a twin run's intervals in uneven chunks (failed polls among them),
    gives attribute()'s answer on all of it; and its residual from the sums
    (xᵀGx − 2xᵀB + Σm²) is the residual of the rows themselves."""
    rec, edges, m = _twin()
    tl = timeline_of(rec)
    kw = {"prior": _projected_per_key(rec, tl), "prior_rel_error": PRIOR_REL_ERROR_FLOOR} if kind == "prior" else {}
    bg = kind == "background"
    want = attribute(tl, edges, m, background=bg, **kw)
    sums = AttributionSums(tl.keys, m.shape[1], background=bg)
    cuts = [0, 1, 2, 7, 20, 21, len(m)]
    for a, b in itertools.pairwise(cuts):
        occ, dt_s = design_rows(tl, edges[a : b + 1])
        sums.add(occ, m[a:b], dt_s)
    got = sums.solve(**kw)
    _same(got, want)
    assert got.intervals == len(m) - 2
    occ, dt_s = design_rows(tl, edges)
    a_mat = np.column_stack([occ, dt_s]) if bg else occ
    x = np.vstack([got.bytes_per_phase, got.background_bytes_per_s[None, :]]) if bg else got.bytes_per_phase
    ok = np.isfinite(m).all(axis=1)
    rows = np.linalg.norm(a_mat[ok] @ x - m[ok], axis=0)
    np.testing.assert_allclose(np.sqrt(sums.residual_sq(x)), rows, rtol=1e-6)


def _growing(rec, edges, m, cut_s: float, late_layer_from_s: float):  # type: ignore[no-untyped-def]
    """What a live run has seen ``cut_s`` into the job: the phases ended by then (layer 7 only
    from ``late_layer_from_s`` on, so its keys appear late) and the polls ended by then."""
    t = rec.t0_ns + int(cut_s * 1e9)
    late = rec.t0_ns + int(late_layer_from_s * 1e9)
    rows = [(p.step, p.layer, p.phase, p.start_ns, p.end_ns) for p in rec.phases
            if p.end_ns <= t and (p.layer != 7 or p.start_ns >= late)]
    tl = PhaseTimeline.from_events(rows)
    n = int(np.searchsorted(edges, t, side="right"))
    return tl, edges[:n], m[: n - 1]


def test_live_sums_follow_a_growing_run_and_equal_a_fresh_fit() -> None:
    """A run read every 3 s of job time: intervals folded in once closed, keys (layer 7) appearing
    half way, failed polls, a late rank moving an old phase's window (kept sums rebuilt), and a
    trimmed live window (front chunks dropped) — every answer equals attribute() from scratch."""
    rec, edges, m = _twin(seed=1)
    live = LiveAttribution(margin_ns=5_000_000_000)
    live.CHUNK = 8  # small chunks so the trimmed window drops some
    prior_seen = False
    for cut in np.arange(8.0, 41.0, 3.0):
        tl, e, mm = _growing(rec, edges, m, cut, late_layer_from_s=20.0)
        got_sums = live.sums(tl, e, mm).aligned(tl.keys)
        _same(got_sums.solve(), attribute(tl, e, mm))
        if cut > 30:  # the prior path too
            prior = np.abs(np.random.default_rng(3).standard_normal((len(tl.keys), m.shape[1]))) * 1e8
            _same(got_sums.solve(prior=prior, prior_rel_error=0.05), attribute(tl, e, mm, prior=prior, prior_rel_error=0.05))
            prior_seen = True
    assert prior_seen and live.stats["rebuilds"] == 0, live.stats
    assert live.stats["intervals_folded"] >= 25 and live.stats["intervals_provisional"] <= 7, live.stats
    assert len({k for k in tl.keys if k[0] == 7}) == 2

    # a late rank moves an early phase's median end: what was kept no longer holds
    moved_end = tl.end_ns.copy()
    moved_end[np.flatnonzero(tl.start_ns > e[3])[0]] += 3_000_000  # inside the kept intervals
    moved = PhaseTimeline(tl.key, tl.start_ns, moved_end, tl.keys, tl.step)
    _same(live.sums(moved, e, mm).aligned(tl.keys).solve(), attribute(moved, e, mm))
    assert live.stats["rebuilds"] == 1

    # the live window trimmed: the first 11 polls gone
    folded = live.stats["intervals_folded"]
    e2 = e[11:]
    _same(live.sums(moved, e2, mm[11:]).aligned(tl.keys).solve(), attribute(moved, e2, mm[11:]))
    assert live.stats["chunks_dropped"] >= 1 and live.stats["rebuilds"] == 1
    assert live.stats["intervals_folded"] == folded  # the rest was kept, not summed again

    # a recreated stream (new generation) is never mixed with the old sums
    _same(live.sums(moved, e2, mm[11:] * 2, generation=1).aligned(tl.keys).solve(), attribute(moved, e2, mm[11:] * 2))
    assert live.stats["rebuilds"] == 2


def test_sums_take_new_keys_and_reject_dropping_summed_ones() -> None:
    rec, _, m = _twin()
    tl = timeline_of(rec)
    early = AttributionSums(tl.keys[:4], m.shape[1])
    early.add(np.ones((2, 4)), m[:2])
    grown = early.aligned(tl.keys[::-1])
    assert grown.gram.shape == (len(tl.keys),) * 2 and grown.intervals == 2
    k = len(tl.keys)
    np.testing.assert_array_equal(grown.gram[k - 4 :, k - 4 :], early.gram[::-1, ::-1])
    assert not grown.gram[: k - 4].any() and not grown.cross[: k - 4].any()
    with pytest.raises(ValueError, match="not in the new key set"):
        early.aligned(tl.keys[1:])
    with pytest.raises(ValueError, match="do not match"):
        early.add(np.ones((2, 4)), m[:3])


def test_nnls_gram_solves_idle_columns_exactly_and_the_rest_as_before() -> None:
    """Columns of b without a positive entry (idle ports) are x = 0 exactly (their KKT point);
    the others come out as the solver gives them when it iterates every column."""
    from fabricmon.core.phases import attribution_fit as fit

    rng = np.random.default_rng(11)
    a = rng.random((200, 6))
    g = a.T @ a
    x_true = rng.random((6, 9)) * 1e6
    b = g @ x_true
    b[:, [1, 4, 7]] = 0.0  # idle ports
    b[:, 5] = -np.abs(b[:, 5])  # nothing positive either
    got = fit.nnls_gram(g, b, fit.lstsq_start(g, b))
    assert not got[:, [1, 4, 5, 7]].any()
    live = [0, 2, 3, 6, 8]
    alone = fit.nnls_gram(g, b[:, live], fit.lstsq_start(g, b[:, live]))
    np.testing.assert_allclose(got[:, live], alone, rtol=1e-12)
    np.testing.assert_allclose(got[:, live], x_true[:, live], rtol=1e-6)
