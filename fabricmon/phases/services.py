"""The verbs of the phase view: a run's views (projected, attributed, measured, gated), as plain
data or with their arrays, and folded over steps. The live heatmap's markers are ``markers.py``.

Everything numeric happens in core; ``state`` reads rows and Redis frames into arrays, only the
new ones on each update.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fabricmon.core.phases.routing import Routing
from fabricmon.jobs.models import Run
from fabricmon.phases import state

PXN = state.PXN


def phase_views(
    run: Run, routing: Routing = PXN, source: str | None = None, window: state.StepWindow | None = None
) -> dict[str, Any]:
    """The run's phase-aligned views with their gate verdicts, as plain data for the API and page,
    over a window of steps (default: the newest; ``meta.window`` says which and how to page).

    Served from the run's incremental state (``state.RunPhaseState``): only event blocks,
    matrices and counter frames that arrived since the last answer are read and projected."""
    return phase_snapshot(run, routing, source, window).as_dict()


def phase_snapshot(
    run: Run, routing: Routing = PXN, source: str | None = None, window: state.StepWindow | None = None
) -> state.PhaseSnapshot:
    """The same views with their arrays (what the run's WebSocket diffs between updates)."""
    return state.run_state(run, source, window).snapshot(run, routing)


def fold_layers(view: dict[str, Any], rows: list[int] | None = None) -> dict[str, Any]:
    """Columns (step, layer, phase) → (layer, phase), summed over steps (for the folded heatmap).
    ``rows``: the port positions the values' rows are (``shown_ports``); ``hot_port`` names ports
    by position, as the unfolded view does."""
    if view.get("values") is None or (view["columns"] and view["columns"][0][0] == -1):
        return view
    cols = [tuple(c[1:]) for c in view["columns"]]
    uniq = sorted(set(cols), key=lambda c: (c[0], c[1] != "dispatch", c[1]))
    idx = np.array([uniq.index(c) for c in cols])
    vals = np.asarray(view["values"], dtype=np.float64)  # (None, a port without data: NaN)
    missing = np.isnan(vals)
    folded = np.zeros((len(uniq), vals.shape[1]))
    np.add.at(folded, idx, np.where(missing, 0.0, vals))
    # a sum over steps one of which had no data for the port is not that port's sum: no data
    gaps = np.zeros(folded.shape, dtype=bool)
    np.logical_or.at(gaps, idx, missing)
    best = np.where(gaps, -np.inf, folded).argmax(axis=1)
    return {
        **view,
        "columns": [[-1, *c] for c in uniq],
        "values": [[None if g else v for v, g in zip(row, gap, strict=True)]
                   for row, gap in zip(folded.tolist(), gaps.tolist(), strict=True)],
        "hot_port": (np.asarray(rows)[best] if rows is not None else best).tolist(),
    }
