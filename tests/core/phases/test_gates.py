"""Validation gates on the twin's job: each injected fault fails its own gate and withholds the
view with the reason; without faults every gate of the derived views passes."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from projection_twin_runs import gate_summary, recording, scenario

from fabricmon.core.phases.clocks import estimate_skew
from fabricmon.core.phases.gates import (
    check,
    clock_gate,
    clock_noise_gate,
    coverage_gate,
    rank_ranges,
    step_coverage,
    view_verdict,
)
from fabricmon.core.phases.routing import Routing


def _gate(views, source, name):  # type: ignore[no-untyped-def]
    return next(g for g in views[source].gates if g.name == name)


def test_without_faults_every_gate_of_the_derived_views_passes() -> None:
    views = scenario(recording())
    for source in ("projected", "attributed"):
        assert views[source].verdict == "show", gate_summary(views)
        assert all(g.verdict == "pass" for g in views[source].gates), gate_summary(views)
        assert views[source].load_bytes is not None
    assert _gate(views, "projected", "projected_vs_measured").value < 0.02
    # the projection passed every gate: the attributed view rests on counters + projection prior,
    # and names its hot port only where it beats the runner-up beyond the uncertainty
    att = views["attributed"].as_dict()
    assert att["basis"] == "counters + projection"
    hot = att["hot"]
    assert len(hot["claimed"]) == len(att["columns"]) and any(hot["claimed"])
    for col, claimed, port, top, tied in zip(att["columns"], hot["claimed"], hot["port"], hot["top"], hot["tied"],
                                             strict=True):
        assert port == (top if claimed else None) and top in tied
        if col[2] == "combine":  # the hot host's four NICs carry the same bytes: not separable
            assert not claimed and len(tied) >= 4
    # measured per phase at 1 s polls is true but coarse: drawn, flagged with the reason
    assert views["measured"].verdict == "flag"
    assert "poll_resolution" in views["measured"].as_dict()["failed"][0]


def test_500ms_clock_skew_fails_the_clock_gate_and_withholds() -> None:
    views = scenario(recording(), skew_ns_by_host={3: 500_000_000})
    g = _gate(views, "attributed", "clock_alignment")
    assert g.verdict == "withhold" and abs(g.value - 0.5) < 0.01
    assert "clock_alignment: 500 ms > 250 ms" in g.reason  # a quarter of the 1 s poll interval
    for source in ("measured", "attributed"):
        assert views[source].verdict == "withhold" and views[source].load_bytes is None
        assert views[source].as_dict()["values"] is None
    assert _gate(views, "projected", "rank_map_coverage").verdict == "pass"


def test_half_rank_map_fails_coverage_and_withholds_projection() -> None:
    views = scenario(recording(), coverage=0.5)
    g = _gate(views, "projected", "rank_map_coverage")
    assert g.verdict == "withhold" and g.value == 0.5
    assert "50 % < 90 %" in g.reason
    assert views["projected"].verdict == "withhold"
    assert _gate(views, "attributed", "clock_alignment").verdict == "pass"


@pytest.mark.slow
def test_routing_mismatch_fails_projected_vs_measured_and_withholds() -> None:
    views = scenario(recording("ecmp"), routing=Routing("pxn"))  # the fabric ran ECMP, we assume PXN
    g = _gate(views, "projected", "projected_vs_measured")
    assert g.verdict == "withhold" and g.value > 0.25
    assert views["projected"].verdict == "withhold"
    assert [x.name for x in views["projected"].gates if x.verdict != "pass"] == ["projected_vs_measured"]
    # a projection that failed its gate is no prior: attribution falls back to counters alone,
    # which cannot separate the phases' hot ports, and says so
    att = views["attributed"].as_dict()
    assert att["basis"] == "counters" and not any(att["hot"]["claimed"])
    right = scenario(recording("ecmp"), routing=Routing("ecmp"))
    assert right["projected"].verdict == "show"


def test_skew_estimate_finds_the_skewed_ranks() -> None:
    rng = np.random.default_rng(0)
    inst = np.repeat(np.arange(200), 8)
    rank = np.tile(np.arange(8), 200)
    end = 10**18 + inst * 10**7 + rng.integers(0, 2000, len(inst))  # µs-level jitter
    end[rank == 5] += 500_000_000
    clock = estimate_skew(inst, rank, end, world_size=9)
    assert clock.worst_rank() == 5
    assert abs(clock.error_bound_ns - 5e8) < 5e3
    assert math.isnan(clock.rank_skew_ns[8])  # never seen: unknown, not zero


def test_unknown_values_withhold_and_verdicts_combine() -> None:
    g = check("x", "must be known", math.nan, flag_bound=1, withhold_bound=2)
    assert g.verdict == "withhold" and "unknown" in g.reason and g.as_dict()["value"] is None
    assert clock_gate(0.0, False, 0.01).verdict == "withhold"
    ok = check("y", "small", 0.5, flag_bound=1, withhold_bound=2)
    warn = check("z", "small", 1.5, flag_bound=1, withhold_bound=2)
    assert (view_verdict([ok]), view_verdict([ok, warn]), view_verdict([ok, warn, g])) == ("show", "flag", "withhold")


def test_step_coverage_marks_intervals_that_overlap_unreported_steps() -> None:
    # steps 0, 1 reported (0-100, 100-200 ns), 2-3 not, 4 reported (400-500); polls every 50 ns
    cov = step_coverage([0, 0, 1, 4], [0, 50, 100, 400], [50, 100, 200, 500], np.arange(0, 551, 50))
    assert (cov.reported, cov.span) == (3, 5) and cov.fraction == 0.6
    # the gap runs from step 1's end (200) to step 4's start (400): intervals 200-250 … 350-400
    assert cov.gap_intervals.tolist() == [False] * 4 + [True] * 4 + [False] * 3
    full = step_coverage([0, 1, 2], [0, 100, 200], [100, 200, 300], np.arange(0, 301, 50))
    assert full.fraction == 1.0 and not full.gap_intervals.any()


@pytest.mark.slow
def test_a_sampled_run_is_compared_only_where_every_step_was_reported() -> None:
    """A job that reports every 8th step: the counters carry the other 7 too, so comparing them
    with the projection would blame it for bytes no event describes (97 % off). Without a gap-free
    interval the projection is shown flagged as unverified, naming the sampling; the attribution
    keeps no interval and is withheld, saying why. Reported in blocks of 8 steps of every 16, the
    gap-free intervals check the projection and it passes."""
    rec = recording()
    sampled = scenario(rec, reported=lambda s: s % 8 == 0)
    proj = {g.name: g for g in sampled["projected"].gates}["projected_vs_measured"]
    assert sampled["projected"].verdict == "flag" and proj.verdict == "flag"
    said = re.search(r"the run reports (\d+) of (\d+) steps and no poll interval lies between", proj.reason)
    assert said and abs(int(said[2]) - 8 * int(said[1])) <= 8, proj.reason
    att = {g.name: g for g in sampled["attributed"].gates}["poll_vs_phase"]
    assert sampled["attributed"].verdict == "withhold" and att.verdict == "withhold" and att.value == 0
    assert "only intervals without unreported ones count" in att.reason
    residual = {g.name: g for g in sampled["attributed"].gates}["attribution_residual"]
    assert math.isnan(residual.value)  # nothing fitted: unknown, not 0 %
    blocks = scenario(rec, reported=lambda s: (s // 8) % 2 == 0)
    proj = {g.name: g for g in blocks["projected"].gates}["projected_vs_measured"]
    assert proj.verdict == "pass" and proj.value < 0.01, proj.reason
    assert blocks["projected"].verdict == "show"


def test_a_phase_outside_the_counters_span_is_no_data_in_the_measured_view() -> None:
    """Counters cover [10 s, 20 s]; phases at 5 s and 25 s have no measurement: NaN, never the
    nearest poll interval's bytes (which the page once drew as a value, or −9.2e18 over the wire)."""
    from fabricmon.core.phases.assess import assess

    s = 1_000_000_000
    starts = np.array([5 * s, 12 * s, 15 * s, 25 * s], dtype=np.int64)
    keys = [(i, 0, "dispatch") for i in range(4)]
    edges = np.arange(10, 21, dtype=np.int64) * s
    meas = np.full((10, 3), 2e7)  # the two phases inside the counters' span: 2e8 B per port, as counted
    proj = np.full((4, 3), 1e8)
    views = assess(phase_keys=keys, start_ns=starts, end_ns=starts + s // 10, projected_in=proj,
                   projected_out=proj, coverage=1.0, clock_error_s=1e-4, offset_known=True,
                   edges_ns=edges, measured_in=meas, measured_out=meas)
    load = views["measured"].load_bytes
    assert load is not None
    assert np.isnan(load[[0, 3]]).all() and np.isfinite(load[[1, 2]]).all()
    d = views["measured"].as_dict()
    assert d["values"][0] == [None, None, None] and d["hot_port"][0] is None and d["hot_port"][1] == 0


def test_a_projection_with_skewed_clocks_is_still_shown() -> None:
    """A projection routes the job's own matrices over the topology: no clock enters it. A host
    500 ms off withholds the views that place phases in poll intervals, never the projection."""
    views = scenario(recording(), skew_ns_by_host={3: 500_000_000})
    assert views["projected"].verdict == "show" and views["projected"].load_bytes is not None
    assert "clock_alignment" not in {g.name for g in views["projected"].gates}
    for source in ("measured", "attributed"):
        assert views[source].verdict == "withhold"
        assert _gate(views, source, "clock_alignment").verdict == "withhold"


def test_offset_noise_is_told_from_skew() -> None:
    """One host's probe exchange scatters its events by ±24 ms from one step to the next (noise
    around its true offset, no trend): the old gate's per-rank median read a few ms of it as skew
    and a max over ranks made it the bound; now the systematic bound stays small and the noise
    is reported apart. A steady 40 ms host offset under the same noise is skew: the bound finds the
    40 ms. A biased exchange (noise with a non-zero median) moves events on average, and is skew."""
    rng = np.random.default_rng(1)
    inst = np.repeat(np.arange(300), 8)
    rank = np.tile(np.arange(8), 300)
    end = 10**18 + inst * 100_000_000 + rng.integers(0, 20_000, len(inst))
    noisy = rank >= 6  # one host of 2 GPUs
    per_step = rng.uniform(-24e6, 24e6, 300).astype(np.int64)
    end_noise = end + np.where(noisy, per_step[inst], 0)
    clock = estimate_skew(inst, rank, end_noise, world_size=8)
    assert clock.noise_max_ns > 10e6  # the scatter is seen …
    assert clock.error_bound_ns < 4e6 < clock.noise_max_ns  # … and not taken for skew
    assert clock_noise_gate(clock.noise_max_ns / 1e9, 0.02).verdict == "flag"  # at 20 ms (gNMI) polls
    assert clock_noise_gate(clock.noise_max_ns / 1e9, 1.0).verdict == "pass"  # at 1 s polls: harmless
    skewed = estimate_skew(inst, rank, end_noise + np.where(noisy, 40_000_000, 0), world_size=8)
    assert abs(skewed.error_bound_ns - 40e6) < 5e6 and skewed.worst_rank() >= 6
    # a clock drifting 1 ms/s from 0 at the start of the 30 s run is 30 ms off at its end: the bound
    # is the trend's reach (15 ms at mid-run + 15 ms to the end), not its median, and no noise
    drift = estimate_skew(inst, rank, end + np.where(noisy, (inst * 100_000).astype(np.int64), 0), 8)
    assert 28e6 < drift.error_bound_ns < 32e6 and drift.noise_max_ns < 1e6


def test_noisy_offsets_on_one_host_withhold_nothing() -> None:
    views = scenario(recording(), noise_ns_by_host={2: 36_000_000})
    for source in ("projected", "measured", "attributed"):
        assert views[source].verdict != "withhold", gate_summary(views)
    assert _gate(views, "attributed", "clock_alignment").verdict == "pass"


def test_counters_that_are_mostly_other_traffic_withhold_measured_and_attributed() -> None:
    """Another job's bytes on the run's NIC ports, 3× the run's own: the run is a quarter of what
    the counters count. The measured and attributed views are withheld saying so; the projection
    (the run's own bytes) stays drawn, flagged unverified: those counters cannot check it."""
    views = scenario(recording(), other_traffic=3.0)
    for source in ("measured", "attributed"):
        g = _gate(views, source, "counters_of_run")
        assert g.verdict == "withhold" and g.value < 0.5, g.reason
        assert "mostly other traffic" in g.reason
        assert views[source].verdict == "withhold" and views[source].as_dict()["values"] is None
        assert any("counters_of_run" in r for r in views[source].as_dict()["failed"])
    proj = _gate(views, "projected", "projected_vs_measured")
    assert proj.verdict == "flag" and "not the run's traffic" in proj.reason
    assert views["projected"].verdict == "flag" and views["projected"].load_bytes is not None
    clean = scenario(recording())
    share = _gate(clean, "measured", "counters_of_run")
    assert share.verdict == "pass" and share.value > 0.95


def test_exact_views_claim_a_hot_port_only_by_a_clear_margin_and_keep_its_direction() -> None:
    from fabricmon.core.phases.attribution import margin_hot_ports

    b_in = np.array([[0.0, 10, 5], [3, 100, 96.5], [50, 50, 1]])
    b_out = np.array([[20.0, 1, 5], [3, 1, 1], [50, 1, 1]])
    hot = margin_hot_ports(((0,), (1,), (2,)), b_in, b_out)
    assert hot.port.tolist() == [0, 1, 0]
    assert hot.claimed.tolist() == [True, False, False]  # 3.5 % is no lead; nor a tie of two ports
    assert abs(hot.lead_rel[1] - 0.035) < 1e-9 and np.flatnonzero(hot.tied[1]).tolist() == [1, 2]
    assert [hot.dir_label(k) for k in range(3)] == ["out", "in", "in = out"]  # a tie stays a tie


def test_rank_map_coverage_names_the_missing_ranks_and_the_unplaced_entries() -> None:
    assert rank_ranges([7, 0, 1, 2, 5, 8]) == "0–2, 5, 7–8"
    assert rank_ranges(range(0, 40, 2)).endswith("and 12 more ranges")
    short = coverage_gate(0.75, [4, 5], ["rank 4: host 'nodeX' is not in the fabric"])
    assert short.verdict == "withhold"
    assert short.reason.startswith("rank_map_coverage: 75 % < 90 %")
    assert "not placed: ranks 4–5" in short.reason and "host 'nodeX'" in short.reason
    assert coverage_gate(1.0).reason == "rank_map_coverage: 100 % ≥ 99 %"


def test_nanmedian_cols_equals_numpys_nanmedian() -> None:
    """The sort-based column median is numpy's nanmedian: odd and even counts, NaN gaps, columns
    with one value and with none (NaN, no warning)."""
    from fabricmon.core.phases.clocks import nanmedian_cols

    rng = np.random.default_rng(3)
    for rows, cols in ((1, 4), (2, 3), (7, 16), (64, 256), (9, 1)):
        a = rng.normal(size=(rows, cols)) * 1e9
        a[rng.random(a.shape) < 0.3] = np.nan
        a[:, 0] = np.nan  # a column with nothing
        want = np.full(cols, np.nan)
        has = ~np.isnan(a).all(axis=0)
        want[has] = np.nanmedian(a[:, has], axis=0)
        np.testing.assert_array_equal(nanmedian_cols(a), want)


def test_interval_bytes_sparse_equals_the_dense_product() -> None:
    from fabricmon.core.phases.intervals import interval_bytes, phase_occupancy

    rng = np.random.default_rng(5)
    start = np.sort(rng.integers(0, 10**10, 300))
    end = start + rng.integers(1, 3 * 10**9, 300)
    edges = np.arange(0, 14 * 10**9, 10**9)
    pb = rng.random((300, 40)) * 1e9
    np.testing.assert_allclose(interval_bytes(start, end, pb, edges), phase_occupancy(start, end, edges) @ pb,
                               rtol=1e-12)
