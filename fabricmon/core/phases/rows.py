"""Which ports a run's phase views send as rows, when the fabric has more than anyone can read.

A view is columns (step, layer, phase) × every port of the fabric. At 16,896 ports and a full
window of 16 steps (256 columns) the three views were ~45 MB of JSON per answer, and the scale
bench's ``views.json`` took 6.7 s at p95 while a 5,632-rank job reported densely — and no page
draws 16,896 rows. So above ``max_rows`` ports the answer carries a bounded set of rows:

    1. every column's hot port in every view shown (its argmax, and the attributed view's top and
       runner-up): what the view is for — where the incast is and what it is told from;
    2. then the ports with the most bytes in any column, until ``max_rows``;

in port-index order (leaves by rail, then spines), so the heatmap keeps the fabric's layout. At or
below ``max_rows`` ports every port is a row, as before. Pure numpy over the views' arrays.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from fabricmon.core.phases.assess import SourceView

IntArray = npt.NDArray[np.int64]


def shown_ports(views: Iterable[SourceView], n_ports: int, max_rows: int) -> IntArray:
    """The port positions sent as rows, sorted (all of them when ``n_ports <= max_rows``)."""
    if n_ports <= max_rows:
        return np.arange(n_ports, dtype=np.int64)
    peak = np.zeros(n_ports)
    must = np.zeros(n_ports, dtype=np.bool_)
    for view in views:
        load = view.load_bytes
        if view.verdict == "withhold" or load is None or not load.size:
            continue  # a withheld view is never drawn: its ports do not earn rows
        finite = np.where(np.isfinite(load), load, -np.inf)
        must[np.argmax(finite, axis=1)[np.isfinite(finite).any(axis=1)]] = True
        peak = np.maximum(peak, np.where(np.isfinite(load), load, 0.0).max(axis=0))
        if view.hot is not None:
            must[view.hot.port] = True
            must[view.hot.runner_up] = True
    # hot ports first (busiest first if there are more than max_rows), then the busiest of the rest
    order = np.lexsort((-peak, ~must))[:max_rows]
    return np.sort(order).astype(np.int64)
