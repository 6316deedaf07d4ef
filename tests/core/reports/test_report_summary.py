"""The report's bounds and sums (fabricmon/core/reports/summary.py): pure numpy, no database."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from fabricmon.core.reports.summary import bytes_by_key, hottest, port_totals, report_rows, steps_that_fit

PHASES = ("dispatch", "combine", "dispatch_bwd", "combine_bwd")


def test_steps_that_fit_the_column_bound_within_the_window() -> None:
    assert steps_that_fit(16, 512, 16) == 16  # the window is the tighter bound
    assert steps_that_fit(16, 40, 16) == 2
    assert steps_that_fit(800, 512, 16) == 1  # one step, however many keys
    assert steps_that_fit(0, 512, 16) == 16  # nothing known yet: the window


def test_rows_keep_every_hot_port_then_the_busiest_in_fabric_order() -> None:
    load = np.zeros((3, 10))
    load[:, 7] = 100.0  # busiest
    load[:, 2] = 50.0
    load[:, 5] = 10.0
    load[1, 9] = np.nan  # no data in one column
    rows = report_rows(load, candidates=[2, 5, 7, 9], must=[9], max_rows=3)
    assert rows.tolist() == [2, 7, 9]  # 9 is some column's hot port: kept though it carries least
    assert report_rows(load, [2, 5, 7], [], 10).tolist() == [2, 5, 7]
    assert report_rows(load, [2, 5, 7], [11, -1], 2).tolist() == [2, 7]  # ports off the fabric ignored


@given(st.integers(1, 40), st.integers(1, 30), st.integers(1, 12), st.integers(0, 2**31 - 1))
def test_rows_never_exceed_the_bound_and_never_drop_a_hot_port(ports: int, cols: int, bound: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    load = rng.random((cols, ports)) * 1e9
    hot = load.argmax(axis=1)
    rows = report_rows(load, np.arange(ports), hot, bound)
    assert len(rows) <= bound and np.all(np.diff(rows) > 0)
    kept = np.unique(hot)[:bound]
    assert set(kept.tolist()) <= set(rows.tolist())


def test_bytes_by_key_sums_per_layer_and_phase_in_the_jobs_order() -> None:
    layer = np.array([1, 0, 0, 1, -1, 0])
    phase = np.array([0, 1, 1, 0, 0, 0])
    nbytes = np.array([5, 7, 3, 1, 100, -1])  # no layer, no byte count: left out
    assert bytes_by_key(layer, phase, nbytes, PHASES) == [(0, "combine", 10), (1, "dispatch", 6)]
    assert bytes_by_key([], [], [], PHASES) == []


def test_port_totals_and_the_hottest_ports() -> None:
    load = np.array([[1.0, np.nan, 5.0, np.nan], [2.0, 4.0, np.nan, np.nan]])
    totals = port_totals(load)
    assert totals[:3].tolist() == [3.0, 4.0, 5.0] and np.isnan(totals[3])
    assert hottest(totals, [0, 1, 2, 3], 3).tolist() == [2, 1, 0]
    assert hottest(totals, [3, 0], 5).tolist() == [0, 3]  # no data at all comes last
