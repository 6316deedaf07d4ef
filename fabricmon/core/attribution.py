"""Attribution: measured counters split over the MoE phases that overlapped each poll interval.

A 1 s poll sums many 2–30 ms phases. Across many steps, though, the poll edges fall at different
points of the step, so each interval holds a different mix of (layer, phase) instances. With the
model "every instance of phase k puts x[k, p] bytes on port p" (plus a background rate b[p]),
port p's measured bytes per interval are ``m[:, p] = O @ x[:, p] + dt · b[p]`` where ``O[i, k]``
is the number of instances of k inside interval i (fractions at the edges). x ≥ 0 is found by
non-negative least squares, for all ports at once (one Gram matrix shared by every port,
accelerated projected gradient — no per-port loop), and the residual says how well the model
explains the counters::

    intervals  │▏d0 c0 d1 c1 … │ … d7 c7 ░gap░ d0 c0 │ d1 … │
    poll edges ▲               ▲                      ▲      ▲
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class PhaseTimeline:
    """Phase instances of a run: which (layer, phase) key each is, and its window in server ns."""

    key: IntArray  # (N,) index into ``keys``
    start_ns: IntArray
    end_ns: IntArray
    keys: tuple[tuple[int, str], ...]  # (layer, phase) per key
    step: IntArray | None = None

    @classmethod
    def from_events(cls, events: Sequence[tuple[int, int, str, int, int]]) -> PhaseTimeline:
        """From (step, layer, phase, start_ns, end_ns) rows; keys sorted by (layer, phase order)."""
        order = {"dispatch": 0, "combine": 1}
        keys = sorted({(int(e[1]), str(e[2])) for e in events}, key=lambda k: (k[0], order.get(k[1], 9), k[1]))
        kid = {k: i for i, k in enumerate(keys)}
        return cls(
            key=np.asarray([kid[(int(e[1]), str(e[2]))] for e in events], dtype=np.int64),
            start_ns=np.asarray([e[3] for e in events], dtype=np.int64),
            end_ns=np.asarray([e[4] for e in events], dtype=np.int64),
            keys=tuple(keys),
            step=np.asarray([e[0] for e in events], dtype=np.int64),
        )


def occupancy(timeline: PhaseTimeline, edges_ns: IntArray) -> FloatArray:
    """(intervals, keys): instances of each key inside each interval, split pro rata at edges.

    Vectorized over instances; a phase longer than a poll interval is split over every interval it
    touches (expanded with ``np.repeat``), so 1 h of 1 s polls × 100 k phases stays O(N).
    """
    edges = np.asarray(edges_ns, dtype=np.int64)
    n_int, n_key = len(edges) - 1, len(timeline.keys)
    out = np.zeros((max(n_int, 0), n_key))
    if n_int <= 0 or not len(timeline.key):
        return out
    s, e = timeline.start_ns, np.maximum(timeline.end_ns, timeline.start_ns + 1)
    i0 = np.clip(np.searchsorted(edges, s, side="right") - 1, 0, n_int - 1)
    i1 = np.clip(np.searchsorted(edges, e, side="left") - 1, 0, n_int - 1)
    inside = (e > edges[0]) & (s < edges[-1])
    span = np.where(inside, i1 - i0 + 1, 0)
    inst = np.repeat(np.arange(len(s)), span)
    first = np.repeat(np.cumsum(span) - span, span)
    i = i0[inst] + (np.arange(len(inst)) - first)
    frac = (np.minimum(edges[i + 1], e[inst]) - np.maximum(edges[i], s[inst])) / (e[inst] - s[inst])
    np.add.at(out, (i, timeline.key[inst]), np.clip(frac, 0.0, None))
    return out


@dataclass(frozen=True)
class Attribution:
    """Per-(layer, phase) bytes per port, estimated from coarse counters, and how well they fit."""

    keys: tuple[tuple[int, str], ...]
    bytes_per_phase: FloatArray  # (K, C): bytes one instance of key k puts on column c
    background_Bps: FloatArray  # (C,) rate not explained by phases
    residual_rel: float  # ‖O·x + dt·b − m‖ / ‖m‖ over everything
    residual_rel_per_column: FloatArray  # (C,)
    intervals: int
    rank: int  # numerical rank of the occupancy matrix (< K: phases not separable)
    condition: float

    def hot_column(self) -> IntArray:
        """(K,) the column (port) with the most attributed bytes in each (layer, phase)."""
        return np.argmax(self.bytes_per_phase, axis=1)


def nnls_shared(a: FloatArray, m: FloatArray, iterations: int = 2000, tol: float = 1e-10) -> FloatArray:
    """min ‖a·x − m‖ s.t. x ≥ 0 for every column of ``m`` at once (a: (I, K), m: (I, C)).

    FISTA on the shared Gram matrix, started from the clipped least-squares solution; each
    iteration is one (K×K)·(K×C) product, so thousands of ports cost what one does in a loop.
    """
    g = a.T @ a
    b = a.T @ m
    lip = float(np.linalg.eigvalsh(g)[-1]) if g.size else 0.0
    if lip <= 0.0:
        return np.zeros((a.shape[1], m.shape[1]))
    x = np.clip(np.linalg.lstsq(a, m, rcond=None)[0], 0.0, None)
    y, t = x.copy(), 1.0
    scale = max(float(np.abs(b).max()), 1e-300)
    for _ in range(iterations):
        x_new = np.clip(y - (g @ y - b) / lip, 0.0, None)
        t_new = (1.0 + np.sqrt(1.0 + 4.0 * t * t)) / 2.0
        y = x_new + ((t - 1.0) / t_new) * (x_new - x)
        step = float(np.abs(x_new - x).max()) * lip / scale
        x, t = x_new, t_new
        if step < tol:
            break
    return x


def attribute(
    timeline: PhaseTimeline,
    edges_ns: IntArray,
    measured_bytes: FloatArray,
    *,
    background: bool = False,
    shrink: float = 1.0,
    prior: FloatArray | None = None,
    prior_weight: float = 1.0,
) -> Attribution:
    """Split measured bytes per interval (I, C) over the timeline's (layer, phase) keys.

    Columns are whatever was measured (ports, or ports × {in, out}); NaN rows (failed polls) are
    dropped, not filled.
    """
    m = np.asarray(measured_bytes, dtype=np.float64)
    edges = np.asarray(edges_ns, dtype=np.int64)
    if m.ndim != 2 or m.shape[0] != len(edges) - 1:
        raise ValueError(f"measured bytes {m.shape} do not match {len(edges) - 1} intervals")
    occ = occupancy(timeline, edges)
    dt_s = np.diff(edges).astype(np.float64) / 1e9
    a = np.column_stack([occ, dt_s]) if background else occ
    ok = np.isfinite(m).all(axis=1)
    a, m_ok = a[ok], m[ok]
    # Scale columns to unit norm so one step size suits phases and background alike.
    norms = np.linalg.norm(a, axis=0)
    norms[norms == 0] = 1.0
    a_n = a / norms
    k = len(timeline.keys)
    if shrink > 0 and k > 1:
        # Occupancy rows are nearly parallel (every poll holds ~the same number of every phase):
        # the step total is well determined, the split between phases only by the cut at each
        # poll edge. A ridge on the differences between phases (x_k − mean x) keeps the noise of
        # step-to-step variation from being amplified into the split.
        lam = shrink * float(np.mean(np.sum(a_n[:, :k] ** 2, axis=0)))
        centre = np.eye(k) - 1.0 / k
        pad = np.zeros((k, a_n.shape[1] - k))
        a_fit = np.vstack([a_n, np.sqrt(lam) * np.hstack([centre, pad])])
        m_fit = np.vstack([m_ok, np.zeros((k, m_ok.shape[1]))])
    else:
        a_fit, m_fit = a_n, m_ok
    if prior is not None and prior_weight > 0:
        # The projection's per-(layer, phase) port pattern as a prior: counters decide what the
        # poll edges can separate, the job's own matrices the rest (rows sqrt(mu)·(x_k − prior_k)).
        pr = np.asarray(prior, dtype=np.float64)
        if pr.shape != (k, m.shape[1]):
            raise ValueError(f"prior {pr.shape} does not match ({k} phases, {m.shape[1]} columns)")
        mu = prior_weight * float(np.mean(np.sum(a_n[:, :k] ** 2, axis=0)))
        rows = np.hstack([np.eye(k), np.zeros((k, a_n.shape[1] - k))]) * np.sqrt(mu)
        a_fit = np.vstack([a_fit, rows])
        m_fit = np.vstack([m_fit, np.sqrt(mu) * pr * norms[:k, None]])
    x = nnls_shared(a_fit, m_fit) / norms[:, None]
    fit = a @ x
    err = np.linalg.norm(fit - m_ok, axis=0)
    tot = np.linalg.norm(m_ok, axis=0)
    sv = np.linalg.svd(occ[ok], compute_uv=False) if occ[ok].size else np.zeros(0)
    rank = int((sv > sv[0] * 1e-9).sum()) if len(sv) else 0
    return Attribution(
        keys=timeline.keys,
        bytes_per_phase=x[:k],
        background_Bps=x[k] if background else np.zeros(m.shape[1]),
        residual_rel=float(np.linalg.norm(fit - m_ok) / max(np.linalg.norm(m_ok), 1e-300)),
        residual_rel_per_column=np.where(tot > 0, err / np.maximum(tot, 1e-300), 0.0),
        intervals=int(ok.sum()),
        rank=rank,
        condition=float(sv[0] / sv[-1]) if len(sv) and sv[-1] > 0 else float("inf"),
    )
