"""TerraceMoE's own numbers from its own inputs (fabric_model.md §4.3), and the run-side gates."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fabricmon.core.whatif.terrace import (
    REFERENCE,
    Calibration,
    breakeven,
    byte_only_breakeven,
    speedup,
    verdict,
)
from fabricmon.core.whatif.terrace_run import (
    LayerDispatch,
    geometry,
    measured_ratio,
    row_bytes,
    terrace_figure,
)

CAL = Calibration()


def test_published_breakevens_at_the_reference_geometry() -> None:
    assert REFERENCE.q == 3 and REFERENCE.ep == 128
    assert round(breakeven(REFERENCE, CAL, "measured"), 2) == 3.98
    assert round(breakeven(REFERENCE, CAL, "fused"), 2) == 1.49
    assert round(breakeven(REFERENCE, CAL, "zero"), 2) == 1.10
    assert byte_only_breakeven(REFERENCE) == pytest.approx(1.3125)


def test_platform_at_1_03_is_below_all_three_so_hierarchy_loses() -> None:
    for chain in ("measured", "fused", "zero"):
        assert verdict(1.03, breakeven(REFERENCE, CAL, chain)) == "hierarchy loses"
        assert speedup(REFERENCE, CAL, chain, 1.03) < 1
    assert verdict(9.0, breakeven(REFERENCE, CAL, "measured")) == "hierarchy wins"  # NVLink node + IB


@pytest.mark.parametrize(("rho", "pytorch", "fused"), [(1.03, 0.40, 0.81), (3.2, 0.87, 1.50), (8, 1.51, 2.19),
                                                       (15.7, 2.04, 2.62)])
def test_speedup_table_of_docs_05(rho: float, pytorch: float, fused: float) -> None:
    assert speedup(REFERENCE, CAL, "measured", rho) == pytest.approx(pytorch, abs=0.006)
    assert speedup(REFERENCE, CAL, "fused", rho) == pytest.approx(fused, abs=0.006)


def _run(n_groups: int = 4, r: int = 4, row: int = 7168, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    counts = rng.integers(5_000, 40_000, size=(n_groups * r, n_groups * r))  # ms-scale phases
    return counts * row, np.repeat(np.arange(n_groups), r)


def _layer(sent: np.ndarray, duration_s: float, **kw: float) -> LayerDispatch:
    return LayerDispatch(layer=0, sent=sent.astype(float), received=kw.get("received", sent).astype(float),
                         event_bytes=float(kw.get("event_bytes", sent.sum())), duration_s=duration_s)


def test_geometry_from_the_measured_matrix() -> None:
    sent, groups = _run()
    assert row_bytes(sent) == 7168
    g = geometry(_layer(sent, 0.01), groups, top_k=8)
    assert (g.groups, g.ranks_per_group) == (4, 4)
    assert 3.0 < g.groups_per_token <= 4.0  # 8 choices over 4 near-uniform groups hit almost all
    assert g.tokens_per_rank == pytest.approx(sent.sum(axis=1).mean() / 7168 / 8)


def _consistent_duration(sent: np.ndarray, groups: np.ndarray, slow_gbs: float) -> float:
    cross = groups[:, None] != groups[None, :]
    return float((sent * cross).sum(axis=0).max()) / (slow_gbs * 1e9)


def _gates(fig) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {g.name: g.verdict for g in fig.gates}


def test_every_gate_passes_on_consistent_measurements() -> None:
    sent, groups = _run()
    fig = terrace_figure([_layer(sent, _consistent_duration(sent, groups, 50.0))], groups, top_k=8,
                         slow_gbs=50.0, ratio=measured_ratio(np.full(5, 400e9), np.full(5, 50e9)))
    assert set(_gates(fig).values()) == {"pass"} and fig.verdict == "show"
    layer = fig.as_dict()["values"]["layers"][0]
    assert layer["verdict"]["measured"] in ("hierarchy wins", "hierarchy loses")
    assert math.isfinite(layer["breakeven"]["fused"])


def test_unmeasured_ratio_withholds_the_verdict() -> None:
    sent, groups = _run()
    fig = terrace_figure([_layer(sent, _consistent_duration(sent, groups, 50.0))], groups, top_k=8,
                         slow_gbs=50.0, ratio=measured_ratio(np.full(5, 400e9), np.zeros(0)), assumed_ratio=9.0)
    assert _gates(fig)["ratio_measured"] == "withhold" and fig.verdict == "withhold"
    d = fig.as_dict()
    assert d["values"] is None and any("ratio_measured" in r for r in d["withheld_because"])
    assert 9.0 in [s["ratio"] for s in d["always"]["sensitivity"]]  # the sensitivity stays, labelled
    assert d["note"] == "sensitivity, not a deployment prediction"


def test_inconsistent_byte_accounting_withholds() -> None:
    sent, groups = _run()
    fig = terrace_figure([_layer(sent, _consistent_duration(sent, groups, 50.0), event_bytes=sent.sum() * 0.8)],
                         groups, top_k=8, slow_gbs=50.0, ratio=8.0)
    assert _gates(fig)["byte_accounting"] == "withhold" and fig.verdict == "withhold"


def test_missing_timings_withhold_and_a_wrong_prediction_withholds() -> None:
    sent, groups = _run()
    missing = terrace_figure([_layer(sent, math.nan)], groups, top_k=8, slow_gbs=50.0, ratio=8.0)
    assert _gates(missing)["flat_prediction"] == "withhold"
    slow = terrace_figure([_layer(sent, 3 * _consistent_duration(sent, groups, 50.0))], groups, top_k=8,
                          slow_gbs=50.0, ratio=8.0)
    assert _gates(slow)["flat_prediction"] == "withhold" and "×1.5" in {g.name: g for g in slow.gates}["flat_prediction"].reason


def test_rows_that_are_not_whole_withhold_unless_the_row_size_is_declared() -> None:
    sent, groups = _run()
    ragged = sent + 1  # cells no longer multiples of one row size
    d = _layer(ragged, _consistent_duration(ragged, groups, 50.0))
    fig = terrace_figure([d], groups, top_k=8, slow_gbs=50.0, ratio=8.0)
    assert _gates(fig)["row_size"] == "withhold" and fig.verdict == "withhold"
    declared = terrace_figure([d], groups, top_k=8, slow_gbs=50.0, ratio=8.0, row=7168)
    assert _gates(declared)["row_size"] == "pass" and declared.verdict == "show"
