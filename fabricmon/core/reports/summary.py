"""What a run's report keeps of its phase views, bounded whatever the run's length or fabric size.

A view is (columns, ports) bytes; a report is a file someone mails around, so it keeps::

    columns   the newest steps that fit ``max_columns`` (steps × the (layer, phase) keys a step has)
    rows      every column's hot port, then the busiest of the run's ports, ``max_rows`` in all,
              in fabric order (rails stay together)
    totals    bytes per (layer, phase), from the events' own byte counts

Pure numpy, no Django: the reports app reads the stores and calls these.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def steps_that_fit(keys_per_step: int, max_columns: int, window_steps: int) -> int:
    """How many of the newest steps a report draws: as many as the phase views' window holds, but
    no more than ``max_columns`` columns (at least one step, however many keys it has)."""
    if keys_per_step <= 0:
        return max(1, window_steps)
    return max(1, min(window_steps, max_columns // keys_per_step))


def report_rows(
    load: npt.ArrayLike, candidates: npt.ArrayLike, must: npt.ArrayLike, max_rows: int
) -> IntArray:
    """The ports a report's heatmap shows, ascending (fabric order).

    ``load`` is (columns, ports) bytes (NaN: no data); ``candidates`` the run's own ports;
    ``must`` the ports a column names as hot (they come first, so a hot port is never cut);
    the rest of the room goes to the candidates with the most bytes over the columns."""
    a = np.asarray(load, dtype=np.float64)
    n = a.shape[1] if a.ndim == 2 else 0
    cand = np.unique(np.asarray(candidates, dtype=np.int64))
    cand = cand[(cand >= 0) & (cand < n)]
    hot = np.unique(np.asarray(must, dtype=np.int64))
    hot = hot[(hot >= 0) & (hot < n)][:max_rows]
    rest = np.setdiff1d(cand, hot)
    room = max(0, max_rows - len(hot))
    if room and len(rest):
        total = np.nansum(a[:, rest], axis=0) if len(a) else np.zeros(len(rest))
        order = np.argsort(-total, kind="stable")[:room]  # ties keep fabric order
        rest = rest[order]
    else:
        rest = rest[:0]
    out: IntArray = np.union1d(hot, rest).astype(np.int64)
    return out


def bytes_by_key(
    layer: npt.ArrayLike, phase: npt.ArrayLike, nbytes: npt.ArrayLike, phase_names: Sequence[str]
) -> list[tuple[int, str, int]]:
    """(layer, phase, bytes) summed over events, in layer order then the job's phase order.

    Events with no layer (< 0) or no byte count (< 0) are left out."""
    lay = np.asarray(layer, dtype=np.int64)
    ph = np.asarray(phase, dtype=np.int64)
    b = np.asarray(nbytes, dtype=np.int64)
    ok = (lay >= 0) & (b >= 0) & (ph >= 0) & (ph < len(phase_names))
    lay, ph, b = lay[ok], ph[ok], b[ok]
    if not len(lay):
        return []
    code = lay * len(phase_names) + ph
    keys, inverse = np.unique(code, return_inverse=True)
    sums = np.bincount(inverse, weights=b.astype(np.float64), minlength=len(keys))
    return [
        (int(k // len(phase_names)), phase_names[int(k % len(phase_names))], round(float(s)))
        for k, s in zip(keys.tolist(), sums.tolist(), strict=True)
    ]


def port_totals(load: npt.ArrayLike) -> FloatArray:
    """Bytes per port over every column (NaN columns skipped; a port with no data at all: NaN)."""
    a = np.asarray(load, dtype=np.float64)
    seen = np.isfinite(a).any(axis=0)
    out: FloatArray = np.where(seen, np.nansum(a, axis=0), np.nan)
    return out


def hottest(totals: npt.ArrayLike, among: npt.ArrayLike, k: int) -> IntArray:
    """The ``k`` ports of ``among`` with the most bytes (NaN last), most first."""
    t = np.asarray(totals, dtype=np.float64)
    ports = np.unique(np.asarray(among, dtype=np.int64))
    ports = ports[(ports >= 0) & (ports < len(t))]
    vals = np.where(np.isfinite(t[ports]), t[ports], -np.inf)
    out: IntArray = ports[np.argsort(-vals, kind="stable")[:k]]
    return out
