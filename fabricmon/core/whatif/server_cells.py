"""Every (step, layer, phase)'s server matrix S (N×N, diagonal 0), kept as its non-zero cells.

An MoE job's S is block-sparse (an EP group of 8 servers fills 64 of 512² cells a row block), and
a run has hundreds of them: at 4,096 ranks 200 dense S are 420 MB whose first touch alone cost
0.2–1 s of page faults (transparent huge pages compacting memory on a loaded machine). The cells
are 4,096 a matrix there. The figures read them through sums and scatters that give the same
numbers as the dense stack: ``sum`` (W), ``row_col_sums`` (each server's bytes out / in, per key),
``blocks`` (the regions' sub-matrices for the OCS), ``dense`` (one matrix, e.g. for drift).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class ServerCells:
    """The non-zero cells of K server matrices (N×N), in the order they were appended."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._index: list[npt.NDArray[np.intp]] = []  # flat cell (row · N + column)
        self._values: list[FloatArray] = []
        self._joined: tuple[IntArray, npt.NDArray[np.intp], FloatArray] | None = None

    def __len__(self) -> int:
        return len(self._index)

    def append(self, s: FloatArray) -> None:
        flat = s.reshape(-1)
        nz = np.flatnonzero(flat)
        self._index.append(nz)
        self._values.append(flat[nz])
        self._joined = None

    def append_cells(self, index: npt.NDArray[np.intp], values: FloatArray) -> None:
        """One matrix given as its cells (unique flat indices; a zero value is harmless)."""
        self._index.append(index)
        self._values.append(values)
        self._joined = None

    def cells(self, i: int) -> tuple[npt.NDArray[np.intp], FloatArray]:
        return self._index[i], self._values[i]

    def dense(self, i: int, out: FloatArray | None = None) -> FloatArray:
        """Key i's N×N matrix (into ``out`` when given: a reused buffer, no fresh pages)."""
        n = self.n
        if out is None:
            out = np.zeros((n, n))
        else:
            out.fill(0.0)
        out.reshape(-1)[self._index[i]] = self._values[i]
        return out

    def stack(self) -> FloatArray:
        """(K, N, N) dense (small runs and tests; the figures do not need it)."""
        out = np.zeros((len(self), self.n, self.n))
        for i in range(len(self)):
            self.dense(i, out[i])
        return out

    def _all(self) -> tuple[IntArray, npt.NDArray[np.intp], FloatArray]:
        """(key, flat cell, value) of every cell of every matrix, joined once."""
        if self._joined is None:
            sizes = [len(x) for x in self._index]
            key = np.repeat(np.arange(len(sizes)), sizes)
            join = (np.concatenate(self._index) if sizes else np.zeros(0, np.intp))
            vals = np.concatenate(self._values) if sizes else np.zeros(0)
            self._joined = (key, join, vals)
        return self._joined

    def sum(self, keys: Sequence[int]) -> FloatArray:
        """Σ of the given keys' matrices (N×N)."""
        n = self.n
        if not len(keys):
            return np.zeros((n, n))
        idx = np.concatenate([self._index[i] for i in keys])
        vals = np.concatenate([self._values[i] for i in keys])
        out: FloatArray = np.bincount(idx, weights=vals, minlength=n * n).astype(np.float64, copy=False)
        return out.reshape(n, n)

    def row_col_sums(self) -> tuple[FloatArray, FloatArray]:
        """(K, N) bytes each server sends and (K, N) it receives, per key."""
        n, k = self.n, len(self)
        key, flat, vals = self._all()
        rows, cols = np.divmod(flat, n)
        out_b: FloatArray = np.bincount(key * n + rows, weights=vals, minlength=k * n).astype(np.float64)
        in_b: FloatArray = np.bincount(key * n + cols, weights=vals, minlength=k * n).astype(np.float64)
        out_b, in_b = out_b.reshape(k, n), in_b.reshape(k, n)
        return out_b, in_b

    def blocks(self, regions: Sequence[IntArray], kmax: int) -> FloatArray:
        """(K, regions, kmax, kmax): each key's sub-matrix on every region's servers (zero padded),
        as ``S[:, m[:, None], m[None, :]]`` would give for region m."""
        n, k = self.n, len(self)
        out = np.zeros((k, len(regions), kmax, kmax))
        if not len(regions):
            return out
        region = np.full(n, -1, dtype=np.int64)
        pos = np.zeros(n, dtype=np.int64)
        for j, m in enumerate(regions):
            region[m] = j
            pos[m] = np.arange(len(m))
        key, flat, vals = self._all()
        rows, cols = np.divmod(flat, n)
        same = (region[rows] >= 0) & (region[rows] == region[cols])
        r_, c_ = rows[same], cols[same]
        at = ((key[same] * len(regions) + region[r_]) * kmax + pos[r_]) * kmax + pos[c_]
        out.reshape(-1)[at] = vals[same]  # one cell per (key, row, column): a plain assignment
        return out
