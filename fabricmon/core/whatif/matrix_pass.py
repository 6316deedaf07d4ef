"""The What-if's one pass over a run's matrices: each (step, layer, phase) matrix is read once and
reduced to what the figures need, nothing rank×rank kept per step.

    for each matrix T (dense, any numeric dtype, or its stored non-zero cells):
        server matrix S = MᵀTM, diagonal 0            → locality, drift, top-K, OCS phase times
        the busiest rank's cross-server bytes          → the per-step flat-time prediction
        window steps: Σ T per (layer, phase), Σ S too  → hierarchy, collectives, routing, placement

Cost, and why it is shaped so (R ranks, N servers; ``bench/whatif.py`` at R = 4,096):

* A dense matrix is read in row blocks of about 512 KB: each block, converted to float32 once,
  gives its servers' sender fold (S and the column sums) and its rows' sums while it is in cache,
  so the matrix crosses memory once instead of twice (6 ms a 64 MB matrix against 4 ms for a bare
  ``np.sum``). Window steps add the block into the float64 sum in the same visit; only the server
  blocks that carry bytes are added when the matrix is non-negative (an MoE job's EP groups).
* Stored sparse cells (the jobs store keeps a matrix as (index, value) pairs when that is smaller)
  on contiguous hosts go through their index pattern's plan (``_Plan``, built once per pattern:
  bincounts over the runs of one sender to one server, ~2 ms a 262 k-cell matrix); while the
  pattern repeats, the window sum is the pattern's summed values (``mean`` gives them as a CSR
  array, ``rank_matrix.py``), and S is kept as its cells (``server_cells.py``). Other rank orders:
  bincounts over the cells, added at their indices. The cost follows the non-zeros.
* Other rank orders (hosts not contiguous or unequal) use membership products, as before.

Precision: S and the row/column sums of a dense matrix are float32 folds (8 terms) and float32 row
sums, as they were before this module; sparse cells are summed in float64. Window sums are
float64 (exact for integer bytes below 2^53).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from fabricmon.core.whatif import rank_matrix as rm
from fabricmon.core.whatif.placement import sum_of
from fabricmon.core.whatif.server_cells import ServerCells

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Key = tuple[int, int, str]
LayerPhase = tuple[int, str]

BLOCK_BYTES = 512 * 1024  # float32 rows per visit: L2-sized (measured best at R = 4,096: 32 rows)


@dataclass(frozen=True)
class SparseCells:
    """A stored n×n matrix as its non-zero cells: row-major flat ``index`` (unique) and ``values``."""

    n: int
    index: npt.NDArray[Any]
    values: npt.NDArray[Any]

    def within(self, r: int) -> SparseCells:
        """The cells of the top-left r×r corner, indexed in an r×r matrix."""
        if r == self.n:
            return self
        idx = self.index.astype(np.int64)
        rows, cols = idx // self.n, idx % self.n
        keep = (rows < r) & (cols < r)
        return SparseCells(r, rows[keep] * r + cols[keep], self.values[keep])

    def dense(self) -> npt.NDArray[Any]:
        out = np.zeros(self.n * self.n, dtype=self.values.dtype)
        out[self.index] = self.values
        return out.reshape(self.n, self.n)


Matrix = npt.NDArray[Any] | SparseCells


@dataclass(frozen=True)
class _Hosts:
    """Where ranks sit, in the forms the kernels use."""

    server: IntArray  # (R,) server of each rank, -1 unplaced
    n: int
    per: int  # ranks per server when hosts are contiguous and equal (rank order), else 0

    @classmethod
    def of(cls, server_of_rank: IntArray, n: int) -> _Hosts:
        r = len(server_of_rank)
        g = r // n if n else 0
        equal = bool(g and g * n == r and np.array_equal(server_of_rank, np.repeat(np.arange(n), g)))
        return cls(np.asarray(server_of_rank, dtype=np.int64), n, g if equal else 0)


def server_and_busiest(t: Matrix, server_of_rank: IntArray, n: int) -> tuple[FloatArray, float]:
    """S of one matrix (diagonal 0) and the busiest rank's bytes to or from other servers."""
    return _reduce(t, _Hosts.of(server_of_rank, n), None)


def _reduce(t: Matrix, hosts: _Hosts, into: FloatArray | None,
            plans: list[_Plan] | None = None) -> tuple[FloatArray, float]:
    """S and the busiest cross bytes; ``into`` (R×R float64), when given, gets ``t`` added."""
    if isinstance(t, SparseCells):
        return _reduce_sparse(t, hosts, into, plans)
    if hosts.per and t.flags.c_contiguous:
        return _reduce_blocks(t, hosts, into)
    if into is not None:
        np.add(into, t, out=into, casting="unsafe")
    return _reduce_member(t, hosts)


def _reduce_blocks(t: npt.NDArray[Any], hosts: _Hosts, into: FloatArray | None) -> tuple[FloatArray, float]:
    """Contiguous equal hosts: one visit per row block of whole servers (see the module doc)."""
    r, n, g = len(hosts.server), hosts.n, hosts.per
    per_block = max(1, BLOCK_BYTES // (4 * r * g))  # servers per block
    rows_per = per_block * g
    from_server = np.empty((n, r), dtype=np.float32)  # each server's senders folded
    row = np.empty(r, dtype=np.float32)
    own_out = np.empty((n, g))
    ones_g, ones_r = np.ones(g, dtype=np.float32), np.ones(r, dtype=np.float32)
    convert = t.dtype != np.float32
    scratch = np.empty((rows_per, r), dtype=np.float32) if convert else None
    may_skip = into is not None and (t.dtype.kind in "ui" or t.dtype == np.float32)
    for h0 in range(0, n, per_block):
        h1 = min(n, h0 + per_block)
        a, b = h0 * g, h1 * g
        blk = t[a:b]
        if scratch is not None:
            b32 = scratch[: b - a]
            np.copyto(b32, blk, casting="unsafe")
        else:
            b32 = blk
        np.matmul(ones_g, b32.reshape(h1 - h0, g, r), out=from_server[h0:h1])
        np.matmul(b32, ones_r, out=row[a:b])
        k = np.arange(h1 - h0)
        own_out[h0:h1] = b32.reshape(h1 - h0, g, n, g)[k, :, h0 + k, :].sum(axis=2, dtype=np.float64)
        if into is not None:
            skip = may_skip and (t.dtype.kind == "u" or bool(b32.min() >= 0))
            _add_block(into[a:b], blk, from_server[h0:h1], g, skip)
    fs = from_server.astype(np.float64)
    s = fs.reshape(n, n, g).sum(axis=2)
    np.fill_diagonal(s, 0.0)
    ar = np.arange(r)
    out_cross = row.astype(np.float64) - own_out.ravel()
    in_cross = fs.sum(axis=0) - fs[hosts.server, ar]
    return s, float(max(out_cross.max(initial=0.0), in_cross.max(initial=0.0)))


def _add_block(into: FloatArray, blk: npt.NDArray[Any], folded: npt.NDArray[np.float32], g: int,
               skip_zero: bool) -> None:
    """into += blk; when blk ≥ 0 (and exactly representable in float32's zero test: integers or
    float32), only over the runs of receiver servers whose folded bytes are non-zero (a zero fold
    of non-negative cells means every cell below it is zero)."""
    if not skip_zero:
        np.add(into, blk, out=into, casting="unsafe")
        return
    busy = folded.reshape(len(folded), -1, g).any(axis=(0, 2))  # receiver servers with bytes
    if busy.all():
        np.add(into, blk, out=into, casting="unsafe")
        return
    edges = np.flatnonzero(np.diff(np.concatenate([[0], busy.astype(np.int8), [0]])))
    for lo, hi in zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True):
        sl = slice(lo * g, hi * g)
        np.add(into[:, sl], blk[:, sl], out=into[:, sl], casting="unsafe")


def _reduce_member(t: npt.NDArray[Any], hosts: _Hosts) -> tuple[FloatArray, float]:
    """Any rank order: membership products (float64)."""
    r, n = len(hosts.server), hosts.n
    member = np.zeros((r, n))
    ok = hosts.server >= 0
    member[np.flatnonzero(ok), hosts.server[ok]] = 1.0
    tt = np.asarray(t, dtype=np.float64)
    to_server, from_server = tt @ member, member.T @ tt
    s = member.T @ to_server
    own = np.maximum(hosts.server, 0)
    ar = np.arange(r)
    out_cross = to_server.sum(axis=1) - to_server[ar, own]
    in_cross = from_server.sum(axis=0) - from_server[own, ar]
    s = np.array(s, dtype=np.float64)
    np.fill_diagonal(s, 0.0)
    return s, float(max(out_cross.max(initial=0.0), in_cross.max(initial=0.0)))


def _reduce_sparse(c: SparseCells, hosts: _Hosts, into: FloatArray | None,
                   plans: list[_Plan] | None = None) -> tuple[FloatArray, float]:
    """Stored non-zero cells: bincounts over the cells (the same sums as the membership products:
    only placed ranks count as a server's; an unplaced rank's "own" server is server 0)."""
    r, n = c.n, hosts.n
    if hosts.per:  # every rank placed, hosts contiguous: the pattern's plan (see _Plan)
        plan = _plan_of(c, hosts, plans)
        v = c.values.astype(np.float64)
        if into is not None:
            into.reshape(-1)[plan.flat] += v  # unique indices: a plain fancy add is exact
        bins, values, busiest = plan.reduce(v, r)
        s = np.zeros((n, n))
        s.reshape(-1)[bins] = values
        return s, busiest
    idx = c.index.astype(np.int64)
    src, dst = np.divmod(idx, r)
    v = c.values.astype(np.float64)
    if into is not None:
        into.reshape(-1)[idx] += v  # unique indices: a plain fancy add is exact
    srv = hosts.server
    s_src, s_dst = srv[src], srv[dst]
    placed = (s_src >= 0) & (s_dst >= 0)
    s = np.asarray(np.bincount(s_src[placed] * n + s_dst[placed], weights=v[placed], minlength=n * n),
                   dtype=np.float64).reshape(n, n)
    np.fill_diagonal(s, 0.0)
    own = np.maximum(srv, 0)
    own_out = (srv[dst] >= 0) & (srv[dst] == own[src])
    own_in = (srv[src] >= 0) & (srv[src] == own[dst])
    out_cross = np.bincount(src, weights=np.where(own_out, 0.0, v), minlength=r)
    in_cross = np.bincount(dst, weights=np.where(own_in | (srv[src] < 0), 0.0, v), minlength=r)
    return s, float(max(out_cross.max(initial=0.0), in_cross.max(initial=0.0)))


@dataclass(frozen=True)
class _Plan:
    """What a sparse index pattern gives every matrix stored with it, on contiguous equal hosts of
    g ranks (an MoE job's EP groups send to the same peers step after step, so the pattern — and
    everything below, derived once — repeats; a new pattern costs one build).

    Row-major cells come in *runs*: the cells of one sender to one receiving server are adjacent
    (index // g is constant along them), so the server matrix and the senders' cross bytes are
    bincounts over the runs' sums (g× fewer terms than cells for an all-pairs group); the
    receivers' cross bytes need the cells. Integer ops run on uint32 (libdivide: ~5× int64's)."""

    index: npt.NDArray[Any]  # the pattern itself (matched by value)
    flat: npt.NDArray[np.intp]  # cell → flat index (window adds)
    starts: npt.NDArray[np.intp] | None  # run starts (None: runs no longer than a cell)
    bins: npt.NDArray[np.intp]  # S's off-diagonal cells the pattern reaches (flat, sorted)
    run_bin: npt.NDArray[np.intp]  # run → its place in ``bins`` (len(bins): the diagonal)
    run_src: npt.NDArray[np.intp]  # run → sender rank
    run_cross: FloatArray  # run → 1.0 when it leaves the sender's server, else 0.0
    dst: npt.NDArray[np.intp]  # cell → receiver rank
    cell_cross: FloatArray  # cell → 1.0 when it crosses servers

    @classmethod
    def build(cls, index: npt.NDArray[Any], r: int, g: int) -> _Plan:
        n = r // g
        small = r * r <= np.iinfo(np.uint32).max
        idx = index.astype(np.uint32 if small else np.int64, copy=False)
        k2 = idx // g  # sender · N + receiving server
        if len(idx) > 1:
            starts = np.flatnonzero(np.concatenate([[True], k2[1:] != k2[:-1]])).astype(np.intp)
        else:
            starts = np.arange(len(idx), dtype=np.intp)
        dense_runs = len(starts) * 2 > len(idx)  # runs too short to pay for the reduceat
        if dense_runs:
            starts = np.arange(len(idx), dtype=np.intp)  # every cell its own run
        run_k = k2[starts]
        src, dsrv = run_k // n, run_k % n
        ssrv = src // g
        dst = idx % r
        cell_cross = (idx // (r * g) != dst // g).astype(np.float64) if small else (
            (idx // r) // g != dst // g).astype(np.float64)
        cross = ssrv != dsrv
        pair = np.asarray(ssrv, dtype=np.intp) * n + np.asarray(dsrv, dtype=np.intp)
        bins, inv = np.unique(pair, return_inverse=True)
        # the diagonal (inside a server) is not part of S: its runs go to one slot past the end
        off = (bins // n) != (bins % n)
        slot = np.full(len(bins), int(off.sum()), dtype=np.intp)
        slot[off] = np.arange(int(off.sum()))
        return cls(index, idx.astype(np.intp), None if dense_runs else starts, bins[off],
                   slot[inv.reshape(-1)], src.astype(np.intp), cross.astype(np.float64),
                   dst.astype(np.intp), cell_cross)

    def reduce(self, v: FloatArray, r: int) -> tuple[npt.NDArray[np.intp], FloatArray, float]:
        """One matrix's float64 values → S as (flat cells, values) and the busiest cross bytes."""
        runs = v if self.starts is None or not len(v) else np.add.reduceat(v, self.starts)
        s: FloatArray = np.bincount(self.run_bin, weights=runs, minlength=len(self.bins) + 1)[:-1].astype(
            np.float64, copy=False)
        out_c = np.bincount(self.run_src, weights=runs * self.run_cross, minlength=r)
        in_c = np.bincount(self.dst, weights=v * self.cell_cross, minlength=r)
        return self.bins, s, float(max(out_c.max(initial=0.0), in_c.max(initial=0.0)))


def _plan_of(c: SparseCells, hosts: _Hosts, plans: list[_Plan] | None) -> _Plan:
    """The cached plan of c's pattern (the newest few are kept), else a new one."""
    for p in plans or ():
        if len(p.index) == len(c.index) and np.array_equal(p.index, c.index):
            return p
    plan = _Plan.build(c.index, c.n, hosts.per)
    if plans is not None:
        plans.insert(0, plan)
        del plans[PLANS_KEPT:]
    return plan


PLANS_KEPT = 4  # patterns kept (dispatch and combine of a layer or two)


@dataclass
class Accumulator:
    """Reductions of a run's matrices as they are read (see the module doc).

    Window sums of sparse cells that keep one index pattern (an EP group's peers, step after step)
    stay as that pattern's summed values until something asks for the dense R×R sum: ``mean``
    scatters them once (no 134 MB sum written 16 times), ``sums`` materialises every one."""

    server_of_rank: IntArray
    n_servers: int
    rank_steps: set[int] | None = None  # steps whose rank×rank matrices are summed (None: all)
    keys: list[Key] = field(default_factory=list)
    sums_recv: dict[LayerPhase, FloatArray] = field(default_factory=dict)
    server_sums: dict[LayerPhase, FloatArray] = field(default_factory=dict)  # Σ S over the same steps
    steps_of: dict[LayerPhase, int] = field(default_factory=dict)
    event_bytes: dict[LayerPhase, float] = field(default_factory=dict)
    start_s: list[float] = field(default_factory=list)
    end_s: list[float] = field(default_factory=list)
    busiest_cross: list[float] = field(default_factory=list)  # per key: busiest rank's cross-server bytes
    expected_keys: int = 0  # how many matrices will come (a hint; the server cells need no preallocation)
    _dense: dict[LayerPhase, FloatArray] = field(default_factory=dict, repr=False)  # dense window sums
    _pending: dict[LayerPhase, tuple[_Plan, FloatArray]] = field(default_factory=dict, repr=False)
    _cells: ServerCells | None = field(default=None, repr=False)  # every key's S as its non-zero cells
    _hosts: _Hosts | None = field(default=None, repr=False)
    _means: dict[LayerPhase, rm.RankMatrix] = field(default_factory=dict, repr=False)
    _means_at: dict[LayerPhase, int] = field(default_factory=dict, repr=False)
    _total: tuple[tuple[int, ...], rm.RankMatrix] | None = field(default=None, repr=False)
    _plans: list[_Plan] = field(default_factory=list, repr=False)  # sparse patterns seen last

    @property
    def sums(self) -> dict[LayerPhase, FloatArray]:
        """(layer, phase) → Σ T over the window (R×R; pending pattern sums are scattered now)."""
        for lp in list(self._pending):
            self._flush(lp)
        return self._dense

    def layer_phases(self) -> list[LayerPhase]:
        """The window's (layer, phase) pairs, sorted (without materialising any sum)."""
        return sorted(self.steps_of)

    def window_cells(self, lp: LayerPhase) -> FloatArray:
        """The window sum's cells where it may be non-zero: the pending pattern's summed values,
        or the dense sum (for ``row_bytes``, which reads only the positive cells)."""
        p = self._pending.get(lp)
        return p[1] if p is not None else self._dense[lp]

    def _flush(self, lp: LayerPhase) -> None:
        p = self._pending.pop(lp, None)
        r = len(self.server_of_rank)
        if lp not in self._dense:
            self._dense[lp] = np.zeros((r, r))
        if p is not None:
            self._dense[lp].reshape(-1)[p[0].flat] += p[1]

    @property
    def server_cells(self) -> ServerCells:
        """Every key's server matrix, as its non-zero cells (``server_cells.py``)."""
        if self._cells is None:
            self._cells = ServerCells(self.n_servers)
        return self._cells

    @property
    def server(self) -> list[FloatArray]:
        """The per-key server matrices (dense copies)."""
        st = self.server_stack()
        return [st[i] for i in range(len(st))]

    def server_stack(self) -> FloatArray:
        """(keys, N, N): every key's server matrix, dense (a copy: for small runs and tests)."""
        return self.server_cells.stack()

    def add(self, key: Key, sent: Matrix, received: Matrix | None = None, *,
            event_bytes: float = math.nan, start_s: float = math.nan, end_s: float = math.nan) -> None:
        """Fold one matrix in (``received`` None: the receivers reported nothing apart from it)."""
        layer, phase = key[1], key[2]
        r, n = len(self.server_of_rank), self.n_servers
        if self._hosts is None:
            self._hosts = _Hosts.of(self.server_of_rank, n)
        sent, received = _corner(sent, r), None if received is None else _corner(received, r)
        in_window = self.rank_steps is None or key[0] in self.rank_steps
        lp = (layer, phase)
        if in_window and lp not in self.steps_of:
            self.server_sums[lp] = np.zeros((n, n))
            self.steps_of[lp] = 0
            self.event_bytes[lp] = 0.0
        if in_window and received is not None and lp not in self.sums_recv:
            # earlier steps without it count as received = sent
            self._flush(lp)
            self.sums_recv[lp] = self._dense[lp].copy()
        if isinstance(sent, SparseCells) and self._hosts.per:
            plan = _plan_of(sent, self._hosts, self._plans)
            v = sent.values.astype(np.float64)
            if in_window:
                self._add_pattern(lp, plan, v)
            bins, s_values, busiest = plan.reduce(v, r)
            self.server_cells.append_cells(bins, s_values)
            if in_window:
                self.server_sums[lp].reshape(-1)[bins] += s_values
        else:
            into = None
            if in_window:
                self._flush(lp)
                into = self._dense[lp]
            s, busiest = _reduce(sent, self._hosts, into, self._plans)
            self.server_cells.append(s)
            if in_window:
                self.server_sums[lp] += s
        self.keys.append(key)
        self.busiest_cross.append(busiest)
        self.start_s.append(start_s)
        self.end_s.append(end_s)
        if not in_window:
            return
        if lp in self.sums_recv:
            _add_into(self.sums_recv[lp], sent if received is None else received)
        self.steps_of[lp] += 1
        self.event_bytes[lp] += event_bytes

    def _add_pattern(self, lp: LayerPhase, plan: _Plan, v: FloatArray) -> None:
        """Window sum += one sparse matrix: kept as the pattern's values while the pattern repeats
        (and no dense sum exists yet), else scattered into the dense sum."""
        p = self._pending.get(lp)
        if lp not in self._dense and (p is None or p[0] is plan):
            self._pending[lp] = (plan, v.copy() if p is None else np.add(p[1], v, out=p[1]))
            return
        self._flush(lp)
        self._dense[lp].reshape(-1)[plan.flat] += v  # unique indices: a plain fancy add is exact

    def mean(self, lp: LayerPhase) -> rm.RankMatrix:
        """Σ T / steps of one (layer, phase), computed once: dense (R×R: 134 MB at 4,096 ranks),
        or the CSR array of a pending pattern's cells (the same numbers, ``rank_matrix``)."""
        hit: rm.RankMatrix | None = self._means.get(lp)
        if hit is None or self._means_at.get(lp) != self.steps_of[lp]:
            steps = max(1, self.steps_of[lp])
            p = self._pending.get(lp)
            if p is not None:  # one pattern: its cells / steps as a sparse matrix (rank_matrix.py)
                hit = rm.csr(len(self.server_of_rank), p[0].flat, p[1] / steps)
            else:
                hit = np.divide(self._dense[lp], steps)
            self._means[lp] = hit
            self._means_at[lp] = self.steps_of[lp]
        return hit

    def mean_total(self) -> rm.RankMatrix:
        """Σ of the per-(layer, phase) means in (layer, phase) order, made once."""
        lps = self.layer_phases()
        at = tuple(self.steps_of[lp] for lp in lps)
        if self._total is None or self._total[0] != at:
            self._total = (at, sum_of([self.mean(lp) for lp in lps]))
        return self._total[1]


def _corner(m: Matrix, r: int) -> Matrix:
    if isinstance(m, SparseCells):
        return m.within(r)
    return m[:r, :r] if m.shape != (r, r) else m


def _add_into(into: FloatArray, m: Matrix) -> None:
    if isinstance(m, SparseCells):
        into.reshape(-1)[m.index.astype(np.int64)] += m.values.astype(np.float64)
    else:
        np.add(into, m, out=into, casting="unsafe")
