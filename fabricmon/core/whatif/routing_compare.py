"""The run's matrices under PXN, ECMP and spraying, side by side with what was measured, and the
balls-into-bins expectation of ECMP collisions (fabric_model.md §6)::

    k equal flows hashed onto n uplinks:  P(no collision) = n!/((n−k)!·n^k)
                                          E[links used]   = n·(1 − (1 − 1/n)^k)
                                          E[max flows on one link]  (Monte Carlo, fixed seed)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def p_no_collision(k: int, n: int) -> float:
    if k > n:
        return 0.0
    return float(math.exp(math.lgamma(n + 1) - math.lgamma(n - k + 1) - k * math.log(n))) if n else 0.0


def expected_links_used(k: int, n: int) -> float:
    return n * (1 - (1 - 1 / n) ** k) if n else 0.0


def expected_max_flows(k: int, n: int, trials: int = 4000, seed: int = 0) -> float:
    """E[max flows on one link] of k flows hashed uniformly onto n links (Monte Carlo)."""
    if k <= 0 or n <= 0:
        return 0.0
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, n, size=(trials, k))
    counts = np.bincount((np.arange(trials)[:, None] * n + picks).ravel(), minlength=trials * n)
    return float(counts.reshape(trials, n).max(axis=1).mean())


def ecmp_expectation(k: int, n: int) -> dict[str, float]:
    """What hashing k flows onto n uplinks leaves, against the ideal ⌈k/n⌉ flows per link."""
    e_max = expected_max_flows(k, n)
    ideal = math.ceil(k / n) if n else 0
    return {"flows": k, "uplinks": n, "p_no_collision": p_no_collision(k, n),
            "expected_links_used": expected_links_used(k, n), "expected_max_flows": e_max,
            "slowdown_vs_ideal": e_max / ideal if ideal else math.nan}


def compare(loads: dict[str, FloatArray], measured: FloatArray | None, columns: list[tuple[int, int, str]],
            port_names: list[str], uplink: npt.NDArray[np.bool_]) -> dict[str, Any]:
    """Per routing: peak port load and where, the hot port of every phase column, how often it is
    the measured one, and the uplinks' max/mean (what ECMP collisions cost and spraying removes)."""
    meas_hot = np.argmax(np.nan_to_num(measured, nan=-1.0), axis=1) if measured is not None else None
    rows = {}
    for mode, load in loads.items():
        if not load.size:
            continue
        hot = np.argmax(load, axis=1)
        peak_col = int(np.argmax(load.max(axis=1)))
        up = load[:, uplink]
        used = up[up > 0]
        rows[mode] = {
            "peak_bytes": float(load.max()),
            "peak_port": port_names[int(hot[peak_col])],
            "peak_phase": list(columns[peak_col]),
            "hot_ports": sorted({port_names[int(p)] for p in hot}),
            "hot_matches_measured": float(np.mean(hot == meas_hot)) if meas_hot is not None else None,
            "uplink_peak_bytes": float(up.max()) if up.size else 0.0,
            "uplink_max_over_mean": float(up.max() / used.mean()) if used.size else None,
        }
    out: dict[str, Any] = {"routings": rows}
    if measured is not None:
        finite = np.where(np.isfinite(measured), measured, 0.0)
        out["measured"] = {"peak_bytes": float(finite.max()),
                           "hot_ports": sorted({port_names[int(p)] for p in meas_hot}) if meas_hot is not None
                           else []}
    return out
