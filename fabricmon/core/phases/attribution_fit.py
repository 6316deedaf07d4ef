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

What 1 s polls can and cannot say: the occupancy rows are nearly parallel (singular values
~4 … 0.003 for 16 phases of a 350 ms step), so each port's bytes *per step* are well determined
but the split between phases is not — its standard error is tens of times the phase's bytes. The
answer therefore carries its uncertainty (``se_bytes``), and ``hot_ports`` names a phase's hot
port only where it beats the runner-up beyond it. With the projection as a prior (``prior=``,
trusted to ``prior_rel_error``) the counters and the job's own matrices combine as two
measurements, and the split comes from the matrices where the poll edges cannot see it.

This module fits; ``attribution.py`` holds what a fit says, ``live_attribution.py`` keeps the
sums of a run that is still growing.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from fabricmon.core.phases.attribution import Attribution
from fabricmon.core.phases.timeline import PhaseTimeline, design_rows

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def lstsq_start(g: FloatArray, b: FloatArray) -> FloatArray:
    """The least-squares solution from the normal equations (pseudo-inverse of the Gram matrix),
    clipped at zero: FISTA's starting point."""
    if not g.size:
        return np.zeros_like(b)
    ev, vec = np.linalg.eigh(g)
    keep = ev > max(float(ev[-1]), 0.0) * 1e-13
    inv = np.where(keep, 1.0 / np.where(keep, ev, 1.0), 0.0)
    x: FloatArray = np.clip(vec @ (inv[:, None] * (vec.T @ b)), 0.0, None)
    return x


def nnls_gram(
    g: FloatArray, b: FloatArray, x0: FloatArray, iterations: int = 2000, tol: float = 1e-10
) -> FloatArray:
    """min ½xᵀgx − xᵀb s.t. x ≥ 0, per column of ``b`` (g = AᵀA, b = Aᵀm): FISTA from ``x0``.

    A column with no positive entry in ``b`` (a port without traffic) is solved exactly by x = 0
    (the gradient there, −b, is ≥ 0: the KKT conditions hold, and the problem is convex), so
    only the other columns iterate — on a fabric most ports of a run's window are idle, and
    these iterations were a fifth of the soak's views.json."""
    lip = float(np.linalg.eigvalsh(g)[-1]) if g.size else 0.0
    if lip <= 0.0:
        return np.zeros_like(b)
    active = (b > 0).any(axis=0) if b.ndim == 2 else None
    if active is not None and not active.all():
        out = np.zeros_like(b)
        if active.any():
            out[:, active] = nnls_gram(g, b[:, active], x0[:, active], iterations, tol)
        return out
    x = np.clip(x0, 0.0, None)
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


class AttributionSums:
    """The sums over poll intervals that attribution needs, so it can be updated interval by interval.

    With A the (intervals, K') design (occupancy, plus ``dt`` when ``background``) and m the
    measured bytes (intervals, C), everything :func:`attribute` computes is a function of
    ``gram`` = AᵀA (K'×K'), ``cross`` = Aᵀm (K'×C), ``sq`` = Σm² per column and the interval count:
    column norms are sqrt(diag gram), the ridge and prior only add to the K'×K' system, and the
    residual is ‖Ax − m‖² = xᵀ·gram·x − 2xᵀ·cross + Σm² per column. Adding intervals costs
    O(new · K'·C); :meth:`solve` costs O(K'²·C) (+ FISTA iterations), whatever the run's length.

    Rows fed in must be final: an interval whose phases may still grow (the open edge of a live
    run) is to be added to a :meth:`copy` each update, not to the kept sums. NaN rows (failed
    polls) are dropped. New (layer, phase) keys: :meth:`aligned` pads with zero rows/columns.
    """

    def __init__(self, keys: Sequence[tuple[int, str]], columns: int, *, background: bool = False) -> None:
        self.keys = tuple(keys)
        self.columns = int(columns)
        self.background = background
        n = len(self.keys) + int(background)
        self.gram = np.zeros((n, n))
        self.cross = np.zeros((n, self.columns))
        self.sq = np.zeros(self.columns)
        self.intervals = 0

    def add(
        self, occupancy_rows: FloatArray, measured_rows: FloatArray, dt_s: FloatArray | None = None
    ) -> None:
        """Fold in intervals: occupancy (I, K), measured bytes (I, C), and with ``background`` each
        interval's length in seconds (I,). Rows with a non-finite measurement are dropped."""
        occ = np.asarray(occupancy_rows, dtype=np.float64)
        m = np.asarray(measured_rows, dtype=np.float64)
        if occ.ndim != 2 or occ.shape[1] != len(self.keys):
            raise ValueError(f"occupancy {occ.shape} does not match {len(self.keys)} phases")
        if m.ndim != 2 or m.shape != (occ.shape[0], self.columns):
            raise ValueError(
                f"measured bytes {m.shape} do not match ({occ.shape[0]} intervals, {self.columns} columns)"
            )
        if self.background:
            if dt_s is None or len(dt_s) != occ.shape[0]:
                raise ValueError("background needs each interval's length (dt_s)")
            occ = np.column_stack([occ, np.asarray(dt_s, dtype=np.float64)])
        ok = np.isfinite(m).all(axis=1)
        if not ok.all():
            occ, m = occ[ok], m[ok]
        if not len(m):
            return
        self.gram += occ.T @ occ
        self.cross += occ.T @ m
        self.sq += np.einsum("ic,ic->c", m, m)
        self.intervals += len(m)

    def copy(self) -> AttributionSums:
        out = AttributionSums(self.keys, self.columns, background=self.background)
        out.gram, out.cross, out.sq = self.gram.copy(), self.cross.copy(), self.sq.copy()
        out.intervals = self.intervals
        return out

    def aligned(self, keys: Sequence[tuple[int, str]]) -> AttributionSums:
        """These sums over ``keys`` (a superset, any order): keys not seen yet get zero rows and
        columns — no instance of them in the intervals summed so far, which is what they had."""
        keys = tuple(keys)
        if keys == self.keys:
            return self
        pos = {k: i for i, k in enumerate(keys)}
        have = np.array([k in pos for k in self.keys] + [True] * int(self.background))
        missing = [k for k, h in zip(self.keys, have, strict=False) if not h]
        if missing and (self.gram[~have].any() or self.cross[~have].any()):
            raise ValueError(f"keys {missing[:3]} are summed but not in the new key set")
        src = np.flatnonzero(have)
        idx = np.array([pos[k] for k in self.keys if k in pos] + ([len(keys)] if self.background else []),
                       dtype=np.int64)
        out = AttributionSums(keys, self.columns, background=self.background)
        out.gram[np.ix_(idx, idx)] = self.gram[np.ix_(src, src)]
        out.cross[idx] = self.cross[src]
        out.sq, out.intervals = self.sq.copy(), self.intervals
        return out

    def solve(
        self, *, shrink: float = 1.0, prior: FloatArray | None = None, prior_rel_error: float = 0.05
    ) -> Attribution:
        """The attribution of the intervals summed (see :func:`attribute` for the model)."""
        k, c = len(self.keys), self.columns
        n = k + int(self.background)
        pr = None
        if prior is not None:
            pr = np.asarray(prior, dtype=np.float64)
            if pr.shape != (k, c):
                raise ValueError(f"prior {pr.shape} does not match ({k} phases, {c} columns)")
            if not prior_rel_error > 0:
                raise ValueError(f"prior_rel_error must be > 0, got {prior_rel_error}")
        # Scale columns to unit norm so one step size suits phases and background alike.
        norms = np.sqrt(np.maximum(np.diag(self.gram), 0.0))
        norms[norms == 0] = 1.0
        g_n = self.gram / np.outer(norms, norms)
        b_n = self.cross / norms[:, None]
        g_fit = g_n + _shrink_gram(g_n, k, shrink)
        if not self.intervals:  # no counters at all: the prior as it stands (± its error), or nothing known
            x = np.zeros((n, c))
            se = np.full((k, c), np.inf)
            if pr is not None:
                x[:k] = np.clip(pr, 0.0, None)
                se = _prior_error(pr, prior_rel_error)
        elif pr is not None:
            x, se = self._posterior(g_n, b_n, g_fit, norms, prior=pr, rel_error=prior_rel_error)
        else:
            x = nnls_gram(g_fit, b_n, lstsq_start(g_fit, b_n)) / norms[:, None]
            se = None
        err2 = self.residual_sq(x)
        if se is None:
            se = _counter_errors(g_n, norms, self._sigma(err2, n), k)
        tot = np.sqrt(self.sq)
        err = np.sqrt(err2)
        ev = np.linalg.eigvalsh(self.gram[:k, :k]) if self.intervals and k else np.zeros(0)
        sv = np.sqrt(np.clip(ev[::-1], 0.0, None))
        # singular values from the Gram's eigenvalues: below ~1e-7 of the largest they are rounding
        rank = int((sv > sv[0] * 1e-7).sum()) if len(sv) and sv[0] > 0 else 0
        return Attribution(
            keys=self.keys,
            bytes_per_phase=x[:k],
            background_bytes_per_s=x[k] if self.background else np.zeros(c),
            residual_rel=float(np.sqrt(err2.sum())) / max(float(np.sqrt(self.sq.sum())), 1e-300),
            residual_rel_per_column=np.where(tot > 0, err / np.maximum(tot, 1e-300), 0.0),
            intervals=self.intervals,
            rank=rank,
            condition=float(sv[0] / sv[-1]) if len(sv) and sv[-1] > 0 and rank == len(sv) else float("inf"),
            se_bytes=se,
            residual_std=self._sigma(err2, n),
            prior_used=pr is not None,
        )

    def residual_sq(self, x: FloatArray) -> FloatArray:
        """(C,) ‖A·x − m‖² per column, from the sums (clipped at 0 against rounding)."""
        r2 = np.einsum("kc,kc->c", x, self.gram @ x) - 2.0 * np.einsum("kc,kc->c", x, self.cross) + self.sq
        out: FloatArray = np.maximum(r2, 0.0)
        return out

    def _sigma(self, err2: FloatArray, n_par: int) -> FloatArray:
        """(C,) residual std per interval of each column (degrees of freedom: intervals − unknowns)."""
        out: FloatArray = np.sqrt(err2 / max(self.intervals - n_par, 1))
        return out

    def _posterior(
        self, g_n: FloatArray, b_n: FloatArray, g_fit: FloatArray, norms: FloatArray, *,
        prior: FloatArray, rel_error: float,
    ) -> tuple[FloatArray, FloatArray]:
        """Counters and projection combined as two measurements: (x, se), both (n, C) / (K, C).

        σ_c comes from the counters' own ridge fit (one shared K×K solve); the prior's error is
        ``rel_error`` of the projected value with a floor of 1 % of the phase's top port, so a
        projected zero is not taken as exact. Each column is one small solve, batched.
        """
        k, n, c = prior.shape[0], len(g_n), self.columns
        eps = 1e-12 * max(float(np.trace(g_fit)), 1.0)
        x_ridge = np.linalg.solve(g_fit + eps * np.eye(n), b_n) / norms[:, None]
        sigma = np.maximum(self._sigma(self.residual_sq(x_ridge), n), 1e-300)  # (C,)
        tau = _prior_error(prior, rel_error)  # (K, C) bytes
        tau_n = np.maximum(tau * norms[:k, None], 1e-300)  # in the normalised unknowns
        w = np.zeros((n, c))
        w[:k] = (sigma[None, :] / tau_n) ** 2  # prior precision relative to one interval's
        # a whisker of ridge: every solve regular (the background column has no prior)
        w += 1e-9 * max(float(np.trace(g_n)) / n, 1.0)
        h = g_n[None, :, :] + np.einsum("kc,kj->ckj", w, np.eye(n))  # (C, n, n)
        rhs = b_n.T + (w * np.vstack([prior * norms[:k, None], np.zeros((n - k, c))])).T
        h_inv = np.linalg.inv(h)
        x_n = np.einsum("cij,cj->ic", h_inv, rhs)
        diag = np.einsum("cii->ic", h_inv)[:k]
        x = np.clip(x_n, 0.0, None) / norms[:, None]
        se = sigma[None, :] * np.sqrt(np.maximum(diag, 0.0)) / norms[:k, None]
        return x, se


    def __iadd__(self, other: AttributionSums) -> AttributionSums:
        """Add another set of sums over the same columns (keys aligned to the union, in place)."""
        if other.columns != self.columns or other.background != self.background:
            raise ValueError("sums over different columns cannot be added")
        keys = self.keys + tuple(k for k in other.keys if k not in set(self.keys))
        mine = self.aligned(keys)
        theirs = other.aligned(keys)
        self.keys, self.gram, self.cross = keys, mine.gram + theirs.gram, mine.cross + theirs.cross
        self.sq = self.sq + other.sq
        self.intervals += other.intervals
        return self


def attribute(
    timeline: PhaseTimeline,
    edges_ns: IntArray,
    measured_bytes: FloatArray,
    *,
    background: bool = False,
    shrink: float = 1.0,
    prior: FloatArray | None = None,
    prior_rel_error: float = 0.05,
) -> Attribution:
    """Split measured bytes per interval (I, C) over the timeline's (layer, phase) keys.

    Columns are whatever was measured (ports, or ports × {in, out}); NaN rows (failed polls) are
    dropped, not filled.

    Counters alone (``prior=None``): NNLS with a ridge on the differences between phases. With
    ``prior`` — the projection's (K, C) bytes per instance, trusted to ± ``prior_rel_error`` — the
    answer is the posterior mean of counters and prior: each column solves
    ``(AᵀA/σ_c² + diag(1/τ_kc²)) x = Aᵀm/σ_c² + prior/τ²`` (batched K×K solves, no per-port
    loop), so the counters decide what the poll edges can separate and the projection the rest.

    One pass of :class:`AttributionSums` over all intervals: a live run keeps the sums and adds
    only new intervals instead.
    """
    m = np.asarray(measured_bytes, dtype=np.float64)
    edges = np.asarray(edges_ns, dtype=np.int64)
    if m.ndim != 2 or m.shape[0] != len(edges) - 1:
        raise ValueError(f"measured bytes {m.shape} do not match {len(edges) - 1} intervals")
    sums = AttributionSums(timeline.keys, m.shape[1], background=background)
    occ, dt_s = design_rows(timeline, edges)
    sums.add(occ, m, dt_s)
    return sums.solve(shrink=shrink, prior=prior, prior_rel_error=prior_rel_error)


def _shrink_gram(g_n: FloatArray, k: int, shrink: float) -> FloatArray:
    """The ridge λ·Σ(x_k − mean x)² as a K'×K' term added to the normalised Gram matrix (zero
    targets: nothing added to Aᵀm).

    Occupancy rows are nearly parallel (every poll holds ~the same number of every phase): the
    step total is well determined, the split between phases only by the cut at each poll edge. The
    ridge keeps the noise of step-to-step variation from being amplified into the split.
    """
    n = len(g_n)
    if shrink <= 0 or k <= 1:
        return np.zeros((n, n))
    lam = shrink * float(np.mean(np.diag(g_n)[:k]))
    centre = np.hstack([np.eye(k) - 1.0 / k, np.zeros((k, n - k))])
    out: FloatArray = lam * (centre.T @ centre)
    return out


def _prior_error(prior: FloatArray, rel_error: float) -> FloatArray:
    """(K, C) bytes: ``rel_error`` of each projected value, at least 1 % of the phase's top port
    (a projected zero is not taken as exact)."""
    p_abs = np.abs(prior)
    tau: FloatArray = rel_error * np.maximum(p_abs, 0.01 * p_abs.max(axis=1, keepdims=True))
    return tau


def _counter_errors(g_n: FloatArray, norms: FloatArray, sigma: FloatArray, k: int) -> FloatArray:
    """(K, C) standard error of each counters-alone estimate: σ_c·sqrt(diag (AᵀA)⁻¹).

    The shrink ridge is a stabiliser, not information, so it is left out: a split the poll edges
    cannot see (nearly parallel occupancy columns) gets the huge error it has, not the ridge's
    confidence.
    """
    ev, vec = np.linalg.eigh(g_n)
    floor = max(float(ev[-1]) * 1e-12, 1e-200) if len(ev) else 1.0
    inv_diag = (vec[:k] ** 2) @ (1.0 / np.maximum(ev, floor))
    se: FloatArray = np.sqrt(inv_diag / norms[:k] ** 2)[:, None] * sigma[None, :]
    return se
