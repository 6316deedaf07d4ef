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

    se_bytes: FloatArray | None = None  # (K, C) standard error of bytes_per_phase (see ``attribute``)
    residual_std: FloatArray | None = None  # (C,) per-interval residual std of each column
    prior_used: bool = False  # the projection's per-phase pattern was used as a prior

    def hot_column(self) -> IntArray:
        """(K,) the column (port) with the most attributed bytes in each (layer, phase)."""
        return np.argmax(self.bytes_per_phase, axis=1)

    def load(self, ports: int | None = None) -> FloatArray:
        """(K, P) attributed bytes per instance; with ``ports``, columns are [in | out] of P ports
        and a port's load is its busier direction."""
        x = self.bytes_per_phase
        return np.maximum(x[:, :ports], x[:, ports:]) if ports else x

    def hot_ports(self, ports: int | None = None, z: float = 2.0) -> HotPorts:
        """The hot port of each (layer, phase), claimed only where it beats the runner-up by more
        than ``z`` standard errors of the difference; otherwise the ports it cannot be told from."""
        x = self.bytes_per_phase
        k_n = x.shape[0]
        se = self.se_bytes if self.se_bytes is not None else np.full(x.shape, np.inf)
        if ports:
            busier_out = x[:, ports:] > x[:, :ports]
            load = np.where(busier_out, x[:, ports:], x[:, :ports])
            se_p = np.where(busier_out, se[:, ports:], se[:, :ports])
        else:
            load, se_p = x, se
        rows = np.arange(k_n)
        order = np.argsort(-load, axis=1, kind="stable")
        top, second = order[:, 0], order[:, 1] if load.shape[1] > 1 else order[:, 0]
        top_b = load[rows, top]
        # SE of (top − other) ≤ se_top + se_other whatever the two estimates' correlation: the
        # claim is conservative.
        se_diff = se_p[rows, top][:, None] + se_p
        with np.errstate(invalid="ignore"):
            tied = load >= top_b[:, None] - z * se_diff
        tied[rows, top] = True
        scale = np.where(top_b > 0, top_b, 1.0)
        lead = (top_b - load[rows, second]) / scale
        lead_se = se_diff[rows, second] / scale
        claimed = (lead > z * lead_se) & (top_b > 0)
        return HotPorts(self.keys, top, second, lead, lead_se, claimed, tied, z)


@dataclass(frozen=True)
class HotPorts:
    """Per (layer, phase): the attributed hot port and whether the counters can vouch for it.

    ``claimed[k]``: the top port beats the runner-up by more than z standard errors — draw the
    hot-port marker. Otherwise the cell is *ambiguous*: the top two are within ``lead ± lead_se``
    and ``tied[k]`` marks every port that cannot be told from the top.
    """

    keys: tuple[tuple[int, str], ...]
    port: IntArray  # (K,) attributed hottest port (column)
    runner_up: IntArray  # (K,)
    lead_rel: FloatArray  # (K,) (top − runner-up) / top
    lead_se_rel: FloatArray  # (K,) standard error of lead_rel (inf: not separable at all)
    claimed: npt.NDArray[np.bool_]  # (K,)
    tied: npt.NDArray[np.bool_]  # (K, P) ports not separable from the top (the top included)
    z: float

    def as_dict(self) -> dict[str, object]:
        """JSON-ready: per key the port (None when not claimed), lead, its SE and the tied ports."""
        def num(v: float) -> float | None:
            return float(v) if np.isfinite(v) else None

        return {
            "z": self.z,
            "port": [int(p) if c else None for p, c in zip(self.port, self.claimed, strict=True)],
            "top": self.port.tolist(),
            "runner_up": self.runner_up.tolist(),
            "lead_rel": [num(v) for v in self.lead_rel],
            "lead_se_rel": [num(v) for v in self.lead_se_rel],
            "claimed": self.claimed.tolist(),
            "tied": [np.flatnonzero(t).tolist() for t in self.tied],
        }


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
    a_fit, m_fit = _with_shrink(a_n, m_ok, k, shrink)
    pr = None
    if prior is not None:
        pr = np.asarray(prior, dtype=np.float64)
        if pr.shape != (k, m.shape[1]):
            raise ValueError(f"prior {pr.shape} does not match ({k} phases, {m.shape[1]} columns)")
        if not prior_rel_error > 0:
            raise ValueError(f"prior_rel_error must be > 0, got {prior_rel_error}")
    if not ok.any():  # no counters at all: the prior as it stands (± its error), or nothing known
        x = np.zeros((a.shape[1], m.shape[1]))
        se = np.full((k, m.shape[1]), np.inf)
        if pr is not None:
            x[:k] = np.clip(pr, 0.0, None)
            se = _prior_error(pr, prior_rel_error)
    elif pr is not None:
        x, se = _posterior(a_n, m_ok, (a_fit, m_fit), norms, prior=pr, rel_error=prior_rel_error)
    else:
        x = nnls_shared(a_fit, m_fit) / norms[:, None]
        se = None
    fit = a @ x
    resid = fit - m_ok
    if se is None:
        se = _counter_errors(a_n, norms, resid, k)
    err = np.linalg.norm(resid, axis=0)
    tot = np.linalg.norm(m_ok, axis=0)
    sv = np.linalg.svd(occ[ok], compute_uv=False) if occ[ok].size else np.zeros(0)
    rank = int((sv > sv[0] * 1e-9).sum()) if len(sv) else 0
    return Attribution(
        keys=timeline.keys,
        bytes_per_phase=x[:k],
        background_Bps=x[k] if background else np.zeros(m.shape[1]),
        residual_rel=float(np.linalg.norm(resid)) / max(float(np.linalg.norm(m_ok)), 1e-300),
        residual_rel_per_column=np.where(tot > 0, err / np.maximum(tot, 1e-300), 0.0),
        intervals=int(ok.sum()),
        rank=rank,
        condition=float(sv[0] / sv[-1]) if len(sv) and sv[-1] > 0 else float("inf"),
        se_bytes=se,
        residual_std=_sigma(resid, a_n.shape[1]),
        prior_used=pr is not None,
    )


def _with_shrink(a_n: FloatArray, m: FloatArray, k: int, shrink: float) -> tuple[FloatArray, FloatArray]:
    """Append the ridge rows sqrt(λ)·(x_k − mean x) (zero targets) to the normalised system.

    Occupancy rows are nearly parallel (every poll holds ~the same number of every phase): the
    step total is well determined, the split between phases only by the cut at each poll edge. The
    ridge keeps the noise of step-to-step variation from being amplified into the split.
    """
    if shrink <= 0 or k <= 1:
        return a_n, m
    lam = shrink * float(np.mean(np.sum(a_n[:, :k] ** 2, axis=0)))
    centre = np.hstack([np.eye(k) - 1.0 / k, np.zeros((k, a_n.shape[1] - k))])
    return np.vstack([a_n, np.sqrt(lam) * centre]), np.vstack([m, np.zeros((k, m.shape[1]))])


def _sigma(resid: FloatArray, n_par: int) -> FloatArray:
    """(C,) residual std per interval of each column (degrees of freedom: intervals − unknowns)."""
    var: FloatArray = (resid**2).sum(axis=0) / max(resid.shape[0] - n_par, 1)
    return np.sqrt(var)


def _posterior(
    a_n: FloatArray, m: FloatArray, fit_rows: tuple[FloatArray, FloatArray], norms: FloatArray, *,
    prior: FloatArray, rel_error: float,
) -> tuple[FloatArray, FloatArray]:
    """Counters and projection combined as two measurements: (x, se), both (n, C) / (K, C).

    σ_c comes from the counters' own ridge fit (one shared K×K solve); the prior's error is
    ``rel_error`` of the projected value with a floor of 1 % of the phase's top port, so a
    projected zero is not taken as exact. Each column is one small solve, batched.
    """
    a_fit, m_fit = fit_rows
    k = prior.shape[0]
    g_fit = a_fit.T @ a_fit
    eps = 1e-12 * max(float(np.trace(g_fit)), 1.0)
    x_ridge = np.linalg.solve(g_fit + eps * np.eye(len(g_fit)), a_fit.T @ m_fit)
    sigma = np.maximum(_sigma(a_n @ x_ridge - m, a_n.shape[1]), 1e-300)  # (C,)
    n = a_n.shape[1]
    tau = _prior_error(prior, rel_error)  # (K, C) bytes
    tau_n = np.maximum(tau * norms[:k, None], 1e-300)  # in the normalised unknowns
    w = np.zeros((n, m.shape[1]))
    w[:k] = (sigma[None, :] / tau_n) ** 2  # prior precision relative to one interval's
    g = a_n.T @ a_n
    # a whisker of ridge: every solve regular (the background column has no prior)
    w += 1e-9 * max(float(np.trace(g)) / n, 1.0)
    h = g[None, :, :] + np.einsum("kc,kj->ckj", w, np.eye(n))  # (C, n, n)
    rhs = (a_n.T @ m).T + (w * np.vstack([prior * norms[:k, None], np.zeros((n - k, m.shape[1]))])).T
    h_inv = np.linalg.inv(h)
    x_n = np.einsum("cij,cj->ic", h_inv, rhs)
    diag = np.einsum("cii->ic", h_inv)[:k]
    x = np.clip(x_n, 0.0, None) / norms[:, None]
    se = sigma[None, :] * np.sqrt(np.maximum(diag, 0.0)) / norms[:k, None]
    return x, se


def _prior_error(prior: FloatArray, rel_error: float) -> FloatArray:
    """(K, C) bytes: ``rel_error`` of each projected value, at least 1 % of the phase's top port
    (a projected zero is not taken as exact)."""
    p_abs = np.abs(prior)
    tau: FloatArray = rel_error * np.maximum(p_abs, 0.01 * p_abs.max(axis=1, keepdims=True))
    return tau


def _counter_errors(a_n: FloatArray, norms: FloatArray, resid: FloatArray, k: int) -> FloatArray:
    """(K, C) standard error of each counters-alone estimate: σ_c·sqrt(diag (AᵀA)⁻¹).

    The shrink ridge is a stabiliser, not information, so it is left out: a split the poll edges
    cannot see (nearly parallel occupancy columns) gets the huge error it has, not the ridge's
    confidence.
    """
    ev, vec = np.linalg.eigh(a_n.T @ a_n)
    floor = max(float(ev[-1]) * 1e-12, 1e-200) if len(ev) else 1.0
    inv_diag = (vec[:k] ** 2) @ (1.0 / np.maximum(ev, floor))
    se: FloatArray = np.sqrt(inv_diag / norms[:k] ** 2)[:, None] * _sigma(resid, a_n.shape[1])[None, :]
    return se
