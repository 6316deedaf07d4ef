"""A rank×rank matrix as the figures read it: a dense array, or — when the run's window sums are
sparse (an MoE job's EP groups: 1/64 of the pairs at 4,096 ranks) — a SciPy CSR array of its
non-zero cells. Every figure's reads go through these few operations, so a sparse mean costs its
non-zeros (262 k) instead of 16.8 M cells per pass, and no 134 MB array is written for it.

The results are the dense computation's: the same cells summed (in another order — exact for the
integer byte counts and their means over a window, which are multiples of 1/steps).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from fabricmon.core.phases.projector import Projector

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
RankMatrix = Any  # FloatArray | sp.csr_array (SciPy's sparse arrays are untyped)


def is_sparse(t: RankMatrix) -> bool:
    return bool(sp.issparse(t))


def csr(n: int, flat: npt.NDArray[Any], values: FloatArray) -> Any:
    """The n×n CSR array of unique flat (row-major) cells."""
    rows, cols = np.divmod(np.asarray(flat, dtype=np.int64), n)
    return sp.csr_array((values, (rows, cols)), shape=(n, n))


def dense(t: RankMatrix) -> FloatArray:
    out: FloatArray = t.toarray() if is_sparse(t) else np.asarray(t)
    return out


def total(t: RankMatrix) -> float:
    return float(t.sum())


def row_sums(t: RankMatrix) -> FloatArray:
    out: FloatArray = np.asarray(t.sum(axis=1), dtype=np.float64).reshape(-1)
    return out


def col_sums(t: RankMatrix) -> FloatArray:
    out: FloatArray = np.asarray(t.sum(axis=0), dtype=np.float64).reshape(-1)
    return out


def nonzeros(t: RankMatrix) -> int:
    return int(t.count_nonzero()) if is_sparse(t) else int(np.count_nonzero(t))


def diagonal(t: RankMatrix) -> FloatArray:
    out: FloatArray = np.asarray(t.diagonal(), dtype=np.float64)
    return out


def cells(t: RankMatrix) -> tuple[IntArray, IntArray, FloatArray]:
    """(rows, columns, values) of the stored cells (a sparse matrix's; a dense one's non-zeros)."""
    if is_sparse(t):
        c = t.tocoo()
        return c.row.astype(np.int64), c.col.astype(np.int64), np.asarray(c.data, dtype=np.float64)
    r, c_ = np.nonzero(t)
    return r.astype(np.int64), c_.astype(np.int64), np.asarray(t[r, c_], dtype=np.float64)


def gather(t: RankMatrix, rows: IntArray, cols: IntArray) -> FloatArray:
    """t[rows, cols] (0 where a sparse matrix stores nothing)."""
    if not is_sparse(t):
        out: FloatArray = np.asarray(t[rows, cols], dtype=np.float64)
        return out
    m = t if t.has_canonical_format else t.copy()
    m.sum_duplicates()
    n = m.shape[1]
    keys = np.repeat(np.arange(m.shape[0], dtype=np.int64), np.diff(m.indptr)) * n + m.indices
    want = rows.astype(np.int64) * n + cols
    at = np.minimum(np.searchsorted(keys, want), max(0, len(keys) - 1))
    hit = (keys[at] == want) if len(keys) else np.zeros(len(want), dtype=bool)
    return np.where(hit, np.asarray(m.data, dtype=np.float64)[at] if len(keys) else 0.0, 0.0)


def rows_dense(t: RankMatrix, rows: IntArray) -> FloatArray:
    out: FloatArray = t[rows].toarray() if is_sparse(t) else np.asarray(t[rows])
    return out


def column(t: RankMatrix, j: int) -> FloatArray:
    """Column j, dense (for a sparse matrix, read from its CSC form: make it once, see ``csc``)."""
    if is_sparse(t):
        out: FloatArray = t[:, [j]].toarray().reshape(-1)
        return out
    col: FloatArray = t[:, j]
    return col


def row(t: RankMatrix, i: int) -> FloatArray:
    if is_sparse(t):
        out: FloatArray = t[[i]].toarray().reshape(-1)
        return out
    r: FloatArray = t[i, :]
    return r


def same_group_sum(t: RankMatrix, group: IntArray) -> float:
    """Σ t[i, j] over the pairs with group[i] == group[j] (a sparse matrix: over its cells)."""
    r, c, v = cells(t)
    return float(v[group[r] == group[c]].sum())


def project_load(proj: Projector, t: RankMatrix) -> FloatArray:
    """The busier-direction bytes per port of one matrix: a sparse one folded from its cells
    under PXN (no R×R array), densified for the routings that read every pair."""
    if is_sparse(t) and proj.routing.mode == "pxn":
        r, c, v = cells(t)
        load: FloatArray = proj.project_folded(proj.fold_cells(r, c, v)).load_bytes[0]
        return load
    out: FloatArray = proj.project(dense(t)).load_bytes
    return out
