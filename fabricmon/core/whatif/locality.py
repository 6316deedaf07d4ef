"""mFabric / MixNet's locality analysis on a run's own matrices (mfabric_locality.md §4).

    T[s,l,p]   rank×rank bytes of step s, MoE layer l, phase p
    S = MᵀTM   server×server bytes (diagonal 0: inside a server it is NVLink)
    D = S + Sᵀ the OCS demand of a pair (a circuit is duplex)

Metrics: locality L(R) of a region partition, per-server k-locality, the curve L*(k) with k95/k99,
drift between steps and layers, top-K predictability of the circuits' pairs, and the
phase-symmetry σ that gates all of it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

SYMMETRY_BOUND = 0.05  # σ above this withholds a layer's derived views (§4.1.7)


def server_matrix(traffic: FloatArray, server_of_rank: IntArray, n_servers: int | None = None) -> FloatArray:
    """(…, R, R) rank bytes → (…, N, N) server bytes with the diagonal zeroed."""
    n = int(n_servers if n_servers is not None else server_of_rank.max() + 1)
    member = np.zeros((len(server_of_rank), n))
    ok = server_of_rank >= 0
    member[np.flatnonzero(ok), server_of_rank[ok]] = 1.0
    s = member.T @ traffic @ member
    idx = np.arange(n)
    s[..., idx, idx] = 0.0
    return np.asarray(s)


def locality(s: FloatArray, region_of_server: IntArray) -> float:
    """L(R): the share of inter-server bytes that stay inside a region."""
    total = float(s.sum())
    if total <= 0:
        return math.nan
    same = region_of_server[:, None] == region_of_server[None, :]
    return float((s * same).sum() / total)


def k_locality(s: FloatArray, k: int) -> FloatArray:
    """ℓ_k(i): the share of server i's outbound bytes that go to its top k−1 partners."""
    out = s.sum(axis=1)
    top = -np.sort(-s, axis=1)[:, : max(0, k - 1)].sum(axis=1)
    share: FloatArray = np.divide(top, out, out=np.full(len(out), np.nan), where=out > 0)
    return share


def greedy_regions(w: FloatArray, k: int) -> IntArray:
    """Regions of at most ``k`` servers by greedy merging (§4.2), in rounds: every cluster names the
    cluster it shares most bytes with among those it fits with, and mutual choices merge — the
    pairwise greedy's choices, many at once (rounds ≈ log k, not one per merge). Merging stops
    where clusters share no bytes; no Kernighan–Lin refinement."""
    n = len(w)
    label = np.arange(n)
    cw = (w + w.T).astype(np.float64)
    size = np.ones(n, dtype=np.int64)
    while len(size) > 1:
        c = len(size)
        cand = np.where(size[:, None] + size[None, :] <= k, cw, -1.0)
        np.fill_diagonal(cand, -1.0)
        best = np.argmax(cand, axis=1)
        ok = cand[np.arange(c), best] > 0
        mutual = ok & (best[best] == np.arange(c)) & (np.arange(c) < best)
        if not mutual.any():
            break
        new = np.arange(c)
        new[best[mutual]] = np.flatnonzero(mutual)
        _, new = np.unique(new, return_inverse=True)
        m = int(new.max()) + 1
        cw = np.asarray(np.bincount((new[:, None] * m + new[None, :]).ravel(), weights=cw.ravel(),
                                    minlength=m * m), dtype=np.float64).reshape(m, m)
        size = np.bincount(new, weights=size, minlength=m).astype(np.int64)
        label = new[label]
    return label.astype(np.int64)


def locality_curve(w: FloatArray, max_k: int | None = None) -> dict[str, Any]:
    """L*(k) for k = 1, 2, 4, … (greedy regions), and k95 / k99 (smallest k reaching 0.95 / 0.99)."""
    n = len(w)
    ks, vals = [], []
    k = 1
    while k <= min(n, max_k or n):
        ks.append(k)
        vals.append(locality(w, greedy_regions(w, k)) if k > 1 else 0.0)
        k *= 2
    if ks[-1] != n and (max_k is None or n <= max_k):
        ks.append(n)
        vals.append(1.0 if w.sum() > 0 else math.nan)

    def first(th: float) -> int | None:
        return next((kk for kk, v in zip(ks, vals, strict=True) if v >= th), None)

    return {"k": ks, "L": vals, "k95": first(0.95), "k99": first(0.99)}


def drift(a: FloatArray, b: FloatArray) -> float:
    """‖a − b‖₁ / (‖a‖₁ + ‖b‖₁): 0 the same pattern, 1 disjoint."""
    den = float(np.abs(a).sum() + np.abs(b).sum())
    return float(np.abs(a - b).sum() / den) if den > 0 else math.nan


def top_pairs(d: FloatArray, k: int) -> set[int]:
    """The k heaviest server pairs (upper triangle, flat index) of a demand matrix."""
    return _top_of(_pair_values(d), k)


def _pair_values(d: FloatArray) -> FloatArray:
    """D + Dᵀ over the upper triangle (the pairs a circuit can serve), row-major."""
    upper, lower = _upper_flat(len(d))
    flat = d.reshape(-1)
    out: FloatArray = flat.take(upper) + flat.take(lower)  # flat takes: ~3× the 2-D fancy gathers
    return out


_UPPER: dict[int, tuple[IntArray, IntArray]] = {}
_UPPER_FLAT: dict[int, tuple[IntArray, IntArray]] = {}


def _upper(n: int) -> tuple[IntArray, IntArray]:
    hit = _UPPER.get(n)
    if hit is None:
        hit = _UPPER[n] = np.triu_indices(n, 1)
    return hit


def _upper_flat(n: int) -> tuple[IntArray, IntArray]:
    """Flat indices of the upper triangle's cells (i, j) and of their mirrors (j, i)."""
    hit = _UPPER_FLAT.get(n)
    if hit is None:
        i, j = _upper(n)
        hit = _UPPER_FLAT[n] = (i * n + j, j * n + i)
    return hit


def _top_of(v: FloatArray, k: int) -> set[int]:
    k = min(k, len(v))
    if k <= 0:
        return set()
    order = np.argpartition(-v, k - 1)[:k]  # the k largest, in O(pairs)
    return {int(i) for i in order[v[order] > 0]}


def hit_rate(predicted: FloatArray, actual: FloatArray, k: int) -> float:
    want = top_pairs(actual, k)
    return len(top_pairs(predicted, k) & want) / len(want) if want else math.nan


def _hit(predicted: set[int], want: set[int]) -> float:
    return len(predicted & want) / len(want) if want else math.nan


def symmetry(dispatch: FloatArray, combine: FloatArray) -> float:
    """σ = ‖Ŝ_combine − Ŝ_dispatchᵀ‖₁ with both normalised to their totals (dispatch and combine may
    carry different element sizes, FP8 vs BF16): 0 when combine retraces dispatch."""
    sd, sc = float(dispatch.sum()), float(combine.sum())
    if sd <= 0 or sc <= 0:
        return math.nan
    return float(np.abs(combine / sc - dispatch.T / sd).sum())


def stability(s: Any, circuits: int) -> dict[str, Any]:
    """Drift and top-K predictability over (steps, layers) of server matrices: an (S, L, N, N)
    array or anything with that ``shape`` whose ``s[i, j]`` is one (N, N) matrix. Each matrix's
    |S| total and top-K pairs are found once (not once per comparison)."""
    n_steps, n_layers = s.shape[:2]
    abs_sum: dict[tuple[int, int], float] = {}
    tops: dict[tuple[int, int], set[int]] = {}
    # ``s.cells_at(ij)``, when it has one: the matrix's sorted non-zero (flat index, value) cells —
    # the same sums over its cells instead of its N² entries
    cells_at = getattr(s, "cells_at", None)

    def total(ij: tuple[int, int]) -> float:
        if ij not in abs_sum:
            abs_sum[ij] = (float(np.abs(cells_at(ij)[1]).sum()) if cells_at is not None
                           else float(np.abs(s[ij]).sum()))
        return abs_sum[ij]

    def top(ij: tuple[int, int]) -> set[int]:
        if ij not in tops:
            hit = None
            if cells_at is not None:
                flat, vals = cells_at(ij)
                hit = _top_of_cells(flat, vals, s.shape[-1], circuits)
            tops[ij] = hit if hit is not None else _top_of(_pair_values(s[ij]), circuits)
        return tops[ij]

    def drift_of(a: tuple[int, int], b: tuple[int, int]) -> float:
        den = total(a) + total(b)
        if den <= 0:
            return math.nan
        if cells_at is None:
            return float(np.abs(s[a] - s[b]).sum() / den)
        return _abs_diff_cells(*cells_at(a), *cells_at(b)) / den

    step_pairs = [((i, j), (i - 1, j)) for i in range(1, n_steps) for j in range(n_layers)]
    layer_pairs = [((i, j), (i, j - 1)) for i in range(n_steps) for j in range(1, n_layers)]
    step_drift = [drift_of(a, b) for a, b in step_pairs]
    layer_drift = [drift_of(a, b) for a, b in layer_pairs]
    prev_step = [_hit(top(b), top(a)) for a, b in step_pairs]
    prev_layer = [_hit(top(b), top(a)) for a, b in layer_pairs]
    n = s.shape[-1]
    pairs = n * (n - 1) // 2

    def mean(x: list[float]) -> float | None:
        x = [v for v in x if math.isfinite(v)]
        return float(np.mean(x)) if x else None

    return {"drift_step": mean(step_drift), "drift_layer": mean(layer_drift), "circuits_K": circuits,
            "hit_rate": {"previous_step": mean(prev_step), "previous_layer": mean(prev_layer),
                         "uniform": min(1.0, circuits / pairs) if pairs else None}}


def _abs_diff_cells(ia: IntArray, va: FloatArray, ib: IntArray, vb: FloatArray) -> float:
    """‖a − b‖₁ of two matrices given as sorted unique (flat index, value) cells."""
    _, pa, pb = np.intersect1d(ia, ib, assume_unique=True, return_indices=True)
    only_a = np.ones(len(ia), dtype=bool)
    only_a[pa] = False
    only_b = np.ones(len(ib), dtype=bool)
    only_b[pb] = False
    return float(np.abs(va[pa] - vb[pb]).sum() + np.abs(va[only_a]).sum() + np.abs(vb[only_b]).sum())


def _top_of_cells(flat: IntArray, v: FloatArray, n: int, k: int) -> set[int]:
    """:func:`top_pairs` of an n×n matrix given as its cells: the upper-triangle positions of the
    k heaviest D + Dᵀ pairs (on a tie at the k-th value, the dense partition's choice)."""
    i, j = np.divmod(np.asarray(flat, dtype=np.int64), n)
    off = i != j
    lo, hi = np.minimum(i, j)[off], np.maximum(i, j)[off]
    pos = lo * n - lo * (lo + 1) // 2 + (hi - lo - 1)  # row-major position in the upper triangle
    keys, inv = np.unique(pos, return_inverse=True)
    vals = np.zeros(len(keys))
    # D[i, j] + D[j, i]: at most two terms per pair, so the order of the sum does not matter
    np.add.at(vals, inv.reshape(-1), v[off])
    positive = vals > 0
    k = min(k, n * (n - 1) // 2)
    if k <= 0:
        return set()
    if int(positive.sum()) <= k:
        return {int(x) for x in keys[positive]}
    ranked = np.sort(vals[positive])[::-1]
    if ranked[k - 1] == ranked[k]:
        # a tie at the K-th pair: the dense partition's own choice, on the same pair vector
        # (absent pairs 0.0, present ones their one- or two-term sums) built from the cells
        full = np.zeros(n * (n - 1) // 2)
        full[keys] = vals
        return _top_of(full, k)
    return {int(x) for x in keys[positive][vals[positive] >= ranked[k - 1]]}


def intensity(traffic: FloatArray) -> dict[str, float]:
    """Receiver (expert) intensity r_j = Σ_i T_ij: CV and max/mean (``traffic`` dense or sparse)."""
    r = np.asarray(traffic.sum(axis=0), dtype=np.float64).reshape(-1)
    m = float(r.mean())
    if m <= 0:
        return {"cv": math.nan, "max_over_mean": math.nan}
    return {"cv": float(r.std() / m), "max_over_mean": float(r.max() / m)}
