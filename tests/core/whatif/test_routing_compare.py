"""ECMP collision expectations against fabric_model.md §6's Monte-Carlo table, and the side-by-side
summary of routings."""

from __future__ import annotations

import numpy as np
import pytest

from fabricmon.core.whatif.routing_compare import compare, ecmp_expectation


@pytest.mark.parametrize(("k", "n", "p", "used", "e_max"), [(4, 32, 0.823, 3.82, 1.18), (8, 32, 0.386, 7.18, 1.66),
                                                           (32, 32, 0.0, 20.41, 3.53)])
def test_balls_into_bins_table(k: int, n: int, p: float, used: float, e_max: float) -> None:
    e = ecmp_expectation(k, n)
    assert e["p_no_collision"] == pytest.approx(p, abs=0.002)
    assert e["expected_links_used"] == pytest.approx(used, abs=0.01)
    assert e["expected_max_flows"] == pytest.approx(e_max, abs=0.05)


def test_compare_names_peaks_and_hot_port_agreement() -> None:
    ports = ["leaf:p0", "leaf:p1", "leaf:up0", "leaf:up1"]
    up = np.array([False, False, True, True])
    ecmp = np.array([[5.0, 1.0, 4.0, 0.0], [1.0, 6.0, 3.0, 1.0]])
    spray = np.array([[5.0, 1.0, 2.0, 2.0], [1.0, 6.0, 2.0, 2.0]])
    measured = np.array([[4.0, 1.0, 2.0, 2.0], [2.0, 1.0, 2.0, 2.0]])
    out = compare({"ecmp": ecmp, "spray": spray}, measured, [(0, 0, "dispatch"), (0, 0, "combine")], ports, up)
    assert out["routings"]["ecmp"]["peak_port"] == "leaf:p1" and out["routings"]["ecmp"]["uplink_max_over_mean"] > 1.4
    assert out["routings"]["spray"]["uplink_max_over_mean"] == 1.0
    assert out["routings"]["spray"]["hot_matches_measured"] == 0.5
    assert out["measured"]["hot_ports"] == ["leaf:p0"]
