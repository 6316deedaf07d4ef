"""Projection: a run's per-phase traffic matrices routed over the topology onto switch ports.

"Topology and collective trace on the same table": for a run with a rank map, every
(step, layer, phase) rank×rank byte matrix M becomes bytes in/out of every port::

    rank s ─▶ GPU ─▶ NIC ─▶ [leaf port in] leaf ─┬─▶ [leaf port out] ─▶ NIC of rank d     (same leaf)
                                                 └─▶ [uplink] spine [downlink] ─▶ leaf ─▶ NIC of d

Routing models: see ``routing.py`` (PXN, ECMP hash, spray).

Routing is precomputed once per (fabric layout, rank map, routing) into a sparse incidence matrix
``A`` of shape (2·ports, flows): projected bytes = ``A @ flow_bytes``. For PXN the flows are
(source server, destination rank) — the matrix is folded over each server's senders first, one
pass over M — so the 4,096-GPU case is 2 M columns, not 16 M.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from fabricmon.core.phases.layout import FabricLayout, RankPlacement
from fabricmon.core.phases.routing import Routing, splitmix64

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


_Hops = tuple[IntArray, IntArray, FloatArray]  # (flow, cable, fraction of the flow's bytes)


@dataclass(frozen=True)
class PortBytes:
    """Projected bytes per port (PortIndex order): entering the switch and leaving it."""

    in_bytes: FloatArray  # (P,) or (K, P) for K phases
    out_bytes: FloatArray

    @property
    def load_bytes(self) -> FloatArray:
        """The busier direction of each port (what the heatmap colours)."""
        return np.maximum(self.in_bytes, self.out_bytes)


class Projector:
    """Sparse routing incidence for one (layout, placement, routing); ``project`` is one matvec."""

    _dn_choice: tuple[IntArray, IntArray, int, int] | None = None  # set by _cables for _pairs

    def __init__(self, layout: FabricLayout, placement: RankPlacement, routing: Routing) -> None:
        self.layout, self.placement, self.routing = layout, placement, routing
        self.n_ports = len(layout.index)
        r = placement.world_size
        g_of = placement.gpu_of_rank
        placed = g_of >= 0
        host_of_rank = np.where(placed, layout.gpu_host[np.maximum(g_of, 0)], -1)
        if routing.mode == "pxn":
            # Flows are (source host, destination rank): fold the matrix over each host's senders.
            hosts = np.unique(host_of_rank[placed])
            self._fold_hosts = hosts
            self._fold_rows = [np.flatnonzero(host_of_rank == h) for h in hosts]
            self._fold_order = np.concatenate(self._fold_rows) if len(hosts) else np.zeros(0, np.int64)
            self._fold_starts = np.cumsum([0] + [len(x) for x in self._fold_rows[:-1]]).astype(np.int64)
            self._fold_contiguous = bool(np.array_equal(self._fold_order, np.arange(len(self._fold_order))))
            # rank → its host's row of the folded matrix (-1 unplaced), for callers folding cells
            self._host_pos = np.full(r, -1, dtype=np.int64)
            self._host_pos[placed] = np.searchsorted(hosts, host_of_rank[placed])
            self.n_flows = len(hosts) * r
            # the flows' index arrays in int32 when they fit: ~2 M of them at 4,096 ranks, and half
            # the bytes is half the fresh pages a first build faults in
            it = np.int32 if self.n_flows < 2**31 else np.int64
            a = np.repeat(np.arange(len(hosts), dtype=it), r)  # row of the folded matrix
            d = np.tile(np.arange(r, dtype=it), len(hosts))
            keep = placed[d] & (self._host_pos.astype(it)[d] != a)  # placed, on another host
            a, d = a[keep], d[keep]
            dst_gpu = g_of.astype(it)[d]
            placed_ranks = np.flatnonzero(placed)
            self._in_blocks, proxy_gpus = self._proxy_blocks(placed_ranks)
            if self._in_blocks is None:
                src_gpu = self._proxy(hosts[a], dst_gpu)
            else:  # the proxy depends on d only through its (A, C) block: one gather of the table
                (_, b_n, c_n), _ = self._in_blocks
                per_host = len(proxy_gpus) // len(hosts)
                src_gpu = proxy_gpus.astype(it)[a * per_host + (d // (b_n * c_n)) * c_n + d % c_n]
            columns = a * r + d
            self._plan_pxn(columns, src_gpu, dst_gpu, placed_ranks)
            return
        s = np.repeat(np.arange(r), r)
        d = np.tile(np.arange(r), r)
        keep = placed[s] & placed[d] & (host_of_rank[s] != host_of_rank[d])
        s, d = s[keep], d[keep]
        src_gpu, dst_gpu = g_of[s], g_of[d]
        columns = s * r + d
        self.n_flows = r * r
        self.matrix: sp.csc_matrix | None = self._incidence(columns, src_gpu, dst_gpu)

    # -- building -----------------------------------------------------------------------------------
    def _proxy(self, src_host: IntArray, dst_gpu: IntArray) -> IntArray:
        """PXN proxy GPU on ``src_host`` for ``dst_gpu``: same leaf, else same rail, else same local
        index, else the host's first GPU (the first match in local order wins)."""
        lay = self.layout
        n_h = int(lay.gpu_host.max()) + 1 if lay.n_gpus else 0

        def first_table(key: IntArray) -> IntArray:
            table = np.full((n_h, int(key.max()) + 2), -1, dtype=np.int64)
            # reversed assignment: for duplicate (host, key) the lowest GPU number is written last
            gpus = np.arange(lay.n_gpus)[::-1]
            table[lay.gpu_host[gpus], key[gpus]] = gpus
            return table

        by_leaf, by_rail, by_local = (
            first_table(lay.nic_leaf),
            first_table(lay.gpu_rail),
            first_table(lay.gpu_local),
        )
        first = np.full(n_h, -1, dtype=np.int64)
        first[lay.gpu_host[::-1]] = np.arange(lay.n_gpus)[::-1]
        out = by_leaf[src_host, lay.nic_leaf[dst_gpu]]
        for table, key in ((by_rail, lay.gpu_rail), (by_local, lay.gpu_local)):
            miss = out < 0
            out[miss] = table[src_host[miss], key[dst_gpu[miss]]]
        miss = out < 0
        out[miss] = first[src_host[miss]]
        return out

    def _candidates(self, via_spine: bool) -> tuple[IntArray, IntArray]:
        """Dense (owner, destination leaf, k) table of candidate cables, padded with -1, and counts.

        Uplinks: cables of leaf ``owner`` whose spine also has a cable to the destination leaf.
        Downlinks: cables of spine ``owner`` that land on the destination leaf.
        """
        link = self.layout.link
        n_leaf = len(self.layout.leaf_names)
        owner_col = 2 if via_spine else 0
        n_owner = int(link[:, owner_col].max()) + 1
        spine_reaches = np.zeros((int(link[:, 2].max()) + 1, n_leaf), dtype=bool)
        spine_reaches[link[:, 2], link[:, 0]] = True
        if via_spine:
            ok = np.zeros((len(link), n_leaf), dtype=bool)
            ok[np.arange(len(link)), link[:, 0]] = True
        else:
            ok = spine_reaches[link[:, 2]]  # (cable, target leaf)
        owner = link[:, owner_col]
        c_idx, t_idx = np.nonzero(ok)  # cable-major, then target: cabling order within a cell
        cell = owner[c_idx] * n_leaf + t_idx
        count = np.bincount(cell, minlength=n_owner * n_leaf).reshape(n_owner, n_leaf)
        width = max(1, int(count.max()))
        dense = np.full((n_owner, n_leaf, width), -1, dtype=np.int64)
        # cables in cabling order fill each (owner, target) cell left to right (a stable sort by
        # cell keeps the cable order inside it)
        order = np.argsort(cell, kind="stable")
        cell, c_idx = cell[order], c_idx[order]
        first = np.cumsum(count.reshape(-1)) - count.reshape(-1)
        dense.reshape(-1)[cell * width + np.arange(len(cell)) - first[cell]] = c_idx
        return dense, count

    def _incidence(self, columns: IntArray, src_gpu: IntArray, dst_gpu: IntArray) -> sp.csc_matrix:
        """(2·P + 2·cables, flows) incidence, column-major: a matvec then reads the flow bytes
        once, in order, and scatters into a port vector that stays in cache."""
        lay, p = self.layout, self.n_ports
        rows = [lay.nic_pos[src_gpu], p + lay.nic_pos[dst_gpu]]  # first hop in, last hop out
        cols = [columns, columns]
        vals = [np.ones(len(columns)), np.ones(len(columns))]
        cross, (up_flow, ups, up_frac), (dn_flow, dns, dn_frac) = self._cables(src_gpu, dst_gpu)
        self._dn_choice = None  # only the PXN plan reads it
        if len(cross):
            # Rows per cable (its bytes serve both its ends): fewer non-zeros in the big matrix;
            # ``cable_ends`` spreads the per-cable sums onto ports afterwards.
            c_up, c_dn = columns[cross[up_flow]], columns[cross[dn_flow]]
            n_links = len(lay.link)
            rows += [2 * p + ups, 2 * p + n_links + dns]
            cols += [c_up, c_dn]
            vals += [up_frac, dn_frac]
        self._build_cable_ends()
        m = sp.csc_matrix(
            (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
            shape=(2 * p + 2 * len(lay.link), self.n_flows),
        )
        m.sum_duplicates()
        return m

    def _cables(
        self, src_gpu: IntArray, dst_gpu: IntArray, hops: bool = True
    ) -> tuple[IntArray, _Hops, _Hops]:
        """Flows that change leaf (indices into src/dst) and their (flow, cable, fraction) on the
        uplink and the spine downlink tiers, under the routing's ECMP hash or spray (``hops``
        False: the ECMP flow numbers and fractions, all-ones, are left empty)."""
        lay = self.layout
        leaf = lay.nic_leaf.astype(src_gpu.dtype)  # gathers at the flows' own width
        l1, l2 = leaf[src_gpu], leaf[dst_gpu]
        cross = np.flatnonzero(l1 != l2)
        none = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))
        if not len(cross):
            return cross, none, none
        if not len(lay.link):
            raise ValueError("traffic between leaves but the fabric has no leaf–spine links")
        up_tab, up_cnt = self._candidates(via_spine=False)
        dn_tab, dn_cnt = self._candidates(via_spine=True)
        a, b = l1[cross], l2[cross]
        # flat takes (one index each) rather than 2-/3-D fancy gathers: the same cells, ~2× faster
        n_leaf, w_up, w_dn = up_cnt.shape[1], up_tab.shape[2], dn_tab.shape[2]
        ab = a * n_leaf + b
        cnt_ab = up_cnt.reshape(-1).take(ab)
        if (cnt_ab == 0).any():
            raise ValueError("some leaf pair has no path through a common spine")
        if self.routing.mode == "spray":
            up, dn = self._spray(a, b, up_tab=up_tab, up_cnt=up_cnt, dn_tab=dn_tab, dn_cnt=dn_cnt)
            return cross, up, dn
        key = (src_gpu[cross].astype(np.uint64) << np.uint64(32)) | dst_gpu[cross].astype(np.uint64)
        h1 = splitmix64(key ^ np.uint64(self.routing.seed))
        k_up = (h1 % cnt_ab.astype(np.uint64)).astype(np.int64)
        ups = up_tab.reshape(-1).take(ab * w_up + k_up)
        sb = lay.link[ups, 2] * n_leaf + b
        if int(dn_cnt.max()) <= 1:  # one downlink per (spine, leaf): the second hash picks index 0
            k_dn = np.zeros(len(sb), dtype=np.int64)
        else:
            k_dn = (splitmix64(h1) % dn_cnt.reshape(-1).take(sb).astype(np.uint64)).astype(np.int64)
        dns = dn_tab.reshape(-1).take(sb * w_dn + k_dn)
        self._dn_choice = (b, k_dn, n_leaf, w_dn)  # what picked each downlink (for _pairs)
        if not hops:
            empty = np.zeros(0, np.int64)
            return cross, (empty, ups, np.zeros(0)), (empty, dns, np.zeros(0))
        flow, ones = np.arange(len(cross)), np.ones(len(cross))
        return cross, (flow, ups, ones), (flow, dns, ones)

    def _pairs(self, ups: IntArray, dns: IntArray) -> tuple[IntArray, IntArray]:
        """``np.unique(ups·W + dns, return_inverse=True)`` (W = cables). Under ECMP a flow's
        downlink is fixed by (its uplink's spine, destination leaf, hash index), so the pair is
        also (uplink, destination leaf, index): a key space of cables × leaves × width, small
        enough to mark in an array instead of sorting ~2 M keys."""
        width = max(len(self.layout.link), 1)
        choice = getattr(self, "_dn_choice", None)
        if choice is None or len(choice[0]) != len(ups):
            pairs, inv = np.unique(ups * width + dns, return_inverse=True)
            return pairs, inv.reshape(-1)
        b, k_dn, n_leaf, w_dn = choice
        space = width * n_leaf * w_dn
        if space > 1 << 26:
            pairs, inv = np.unique(ups * width + dns, return_inverse=True)
            return pairs, inv.reshape(-1)
        compact = (ups * n_leaf + b) * w_dn + k_dn
        mark = np.zeros(space, dtype=bool)
        mark[compact] = True
        present = np.flatnonzero(mark)
        first = np.full(space, -1, dtype=np.int64)
        first[compact[::-1]] = np.arange(len(compact))[::-1]  # a flow of each compact key
        full = ups[first[present]] * width + dns[first[present]]
        order = np.argsort(full, kind="stable")  # the pairs in np.unique's (sorted) order
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        lut = np.zeros(space, dtype=np.int64)
        lut[present] = rank
        return full[order], lut[compact]

    def _plan_pxn(
        self, columns: IntArray, src_gpu: IntArray, dst_gpu: IntArray, placed_ranks: IntArray
    ) -> None:
        """PXN with a slim matrix: every flow (source host, destination rank) enters at its proxy's
        NIC port (one non-zero) and leaves at the destination's NIC (a column sum of the folded
        matrix, no non-zero); cross-leaf flows add one non-zero for their (uplink, downlink) cable
        pair (61 k pairs at 4,096 GPUs, spread onto cables afterwards): ~4 M non-zeros per phase
        instead of 8 M."""
        lay, n_f = self.layout, self.n_flows
        self.matrix = None
        kept = np.zeros(n_f, dtype=bool)
        kept[columns] = True
        self._drop = np.flatnonzero(~kept)  # same-host (NVLink) or unplaced: no NIC ever sees them
        self._out_ranks = placed_ranks
        self._out_pos = lay.nic_pos[self.placement.gpu_of_rank[placed_ranks]].astype(np.intp)
        self._dn_choice = None
        cross, (_, ups, _), (_, dns, _) = self._cables(src_gpu, dst_gpu, hops=False)
        width = max(len(lay.link), 1)
        pairs, pair_of = self._pairs(ups, dns)
        self._dn_choice = None
        self._pair_up, self._pair_dn = (pairs // width).astype(np.intp), (pairs % width).astype(np.intp)
        p = self.n_ports
        shape = (p + len(pairs), n_f)
        if self._in_blocks is None:  # no block structure: one non-zero per flow for its proxy port
            self._route = sp.csc_matrix(
                (
                    np.ones(len(columns) + len(cross)),
                    (
                        np.concatenate([lay.nic_pos[src_gpu], p + pair_of]),
                        np.concatenate([columns, columns[cross]]),
                    ),
                ),
                shape=shape,
            )
            self._route.sum_duplicates()
        else:
            # one non-zero per cross-leaf flow, columns ascending and distinct: the canonical CSC
            # arrays directly (what the COO conversion and sum_duplicates would give)
            per_col = np.zeros(n_f + 1, dtype=np.int64)
            per_col[columns[cross] + 1] = 1
            self._route = sp.csc_matrix(
                (np.ones(len(cross)), (p + pair_of).astype(np.int32 if shape[0] < 2**31 else np.int64),
                 np.cumsum(per_col)),
                shape=shape,
            )
            self._route.has_canonical_format = True
        self._build_cable_ends()

    def _proxy_blocks(
        self, placed_ranks: IntArray
    ) -> tuple[tuple[tuple[int, int, int], IntArray] | None, IntArray]:
        """The proxy of flow (host h, rank d) depends on d only through d's (leaf, rail, local
        index) — its *key*. When ranks come in blocks (A, B, C) whose key does not change along B
        (host-major ranks on a rail-optimized fabric: A = SUs, B = servers per SU, C = GPUs per
        server), the bytes each host sends per key are one reshape-sum of the folded matrix, and
        the proxy ports a small table. Returns ((A, B, C), (hosts·A·C) port table) or None, and
        the table's proxy GPUs."""
        lay, r = self.layout, self.placement.world_size
        none = np.zeros(0, np.int64)
        if len(placed_ranks) != r or not len(self._fold_hosts):
            return None, none
        g = self.placement.gpu_of_rank
        triple = np.stack([lay.nic_leaf[g], lay.gpu_rail[g], lay.gpu_local[g]], axis=1)
        _, key = np.unique(triple, axis=0, return_inverse=True)
        key = key.reshape(-1)
        divisors = [c for c in range(1, r + 1) if r % c == 0]
        best: tuple[int, int, int] | None = None
        for c in divisors:
            for b in divisors:
                if r % (b * c) or b == 1 or (best and b <= best[1]):
                    continue
                k3 = key.reshape(r // (b * c), b, c)
                if (k3 == k3[:, :1]).all():
                    best = (r // (b * c), b, c)
        if best is None:
            return None, none
        a_n, b_n, c_n = best
        rep = np.arange(r).reshape(a_n, b_n, c_n)[:, 0, :].reshape(-1)  # one rank per (A, C) block
        hosts = np.repeat(self._fold_hosts, len(rep))
        proxy = self._proxy(hosts, np.tile(g[rep], len(self._fold_hosts)))
        return (best, lay.nic_pos[proxy].astype(np.intp)), proxy

    def _build_cable_ends(self) -> None:
        lay, p = self.layout, self.n_ports
        n_links = len(lay.link)
        link = lay.link.reshape(-1, 4)
        cables = np.arange(n_links)
        # uplink = leaf port out, spine port in; downlink = spine port out, leaf port in
        self.cable_ends = sp.csr_matrix(
            (
                np.ones(4 * n_links),
                (
                    np.concatenate([p + link[:, 1], link[:, 3], p + link[:, 3], link[:, 1]]),
                    np.concatenate([cables, cables, n_links + cables, n_links + cables]),
                ),
            ),
            shape=(2 * p, 2 * n_links),
        )

    def _spray(
        self, a: IntArray, b: IntArray, *,
        up_tab: IntArray, up_cnt: IntArray, dn_tab: IntArray, dn_cnt: IntArray,
    ) -> tuple[_Hops, _Hops]:
        """Even split: a flow's bytes over every usable uplink (1/n each), then at that spine over
        every downlink to the destination leaf. Returns (flow, cable, fraction) for both tiers."""

        def expand(tab: IntArray, own: IntArray, dst: IntArray) -> tuple[IntArray, IntArray]:
            width = tab.shape[2]
            f = np.repeat(np.arange(len(own)), width)
            cab = tab[own[f], dst[f], np.tile(np.arange(width), len(own))]
            return f[cab >= 0], cab[cab >= 0]

        f_up, ups = expand(up_tab, a, b)
        up_frac = 1.0 / up_cnt[a[f_up], b[f_up]]
        spine = self.layout.link[ups, 2]
        j, dns = expand(dn_tab, spine, b[f_up])  # j indexes the (flow, uplink) pairs
        dn_frac = up_frac[j] / dn_cnt[spine[j], b[f_up][j]]
        return (f_up, ups, up_frac), (f_up[j], dns, dn_frac)

    # -- using --------------------------------------------------------------------------------------
    def flows(self, traffic: FloatArray) -> FloatArray:
        """Rank×rank bytes (R, R) or a stack (K, R, R) → flow bytes (n_flows,) or (n_flows, K)."""
        r = self.placement.world_size
        t = np.asarray(traffic)
        if t.shape[-2:] != (r, r):
            raise ValueError(f"traffic matrix shape {t.shape} does not match the rank map's world of {r}")
        flat = self._fold(t) if self.routing.mode == "pxn" else t.reshape(-1, r * r)
        return (
            flat[0].astype(np.float64, copy=False)
            if t.ndim == 2
            else np.ascontiguousarray(flat.T, dtype=np.float64)
        )

    def project(self, traffic: FloatArray) -> PortBytes:
        """Projected bytes in/out of every port for one phase (R, R) or K phases (K, R, R)."""
        if self.matrix is None:
            return self._project_pxn(traffic)
        z = self.matrix @ self.flows(traffic)
        p = self.n_ports
        y = z[: 2 * p] + self.cable_ends @ z[2 * p :]
        if y.ndim == 1:
            return PortBytes(in_bytes=y[:p], out_bytes=y[p:])
        return PortBytes(in_bytes=y[:p].T.copy(), out_bytes=y[p:].T.copy())

    def _project_pxn(self, traffic: FloatArray) -> PortBytes:
        t = np.asarray(traffic)
        folded = self._fold(t)  # (K, flows): the one pass over the R×R input
        out = self.project_folded(folded)
        if t.ndim == 2:
            return PortBytes(in_bytes=out.in_bytes[0], out_bytes=out.out_bytes[0])
        return out

    def fold_cells(self, src: IntArray, dst: IntArray, values: FloatArray | float) -> FloatArray:
        """PXN: the (hosts·R,) flows of a matrix given as its cells (sender rank, receiver rank,
        bytes) — what ``_fold`` makes of the dense matrix, without writing it; cells of unplaced
        senders are dropped as their rows are."""
        r = self.placement.world_size
        pos = self._host_pos[src]
        ok = pos >= 0
        w = np.broadcast_to(np.asarray(values, dtype=np.float64), pos.shape)[ok]
        folded = np.bincount(pos[ok] * r + np.asarray(dst)[ok], weights=w, minlength=self.n_flows)
        return np.asarray(folded, dtype=np.float64)

    def project_folded(self, folded: FloatArray) -> PortBytes:
        """PXN: (K, hosts·R) flow bytes — each source host's bytes to each rank, what ``_fold``
        makes of K matrices — to (K, P) port bytes. A caller holding a matrix's cells (a collective
        schedule, a sparse mean) folds them itself instead of writing an R×R matrix. ``folded``
        is modified (the same-host flows are zeroed)."""
        if self.routing.mode != "pxn":
            raise ValueError("folded flows are PXN's (source host, destination rank) flows")
        folded = np.asarray(folded, dtype=np.float64).reshape(-1, self.n_flows)
        folded[:, self._drop] = 0.0
        p, n_links, r = self.n_ports, len(self.layout.link), self.placement.world_size
        by_host = folded.reshape(len(folded), -1, r)
        to_rank = np.ones(by_host.shape[1]) @ by_host  # (K, R) bytes arriving per rank (BLAS sum)
        y = np.empty((len(folded), 2 * p))
        if self._in_blocks is not None:
            (_, b_n, c_n), ports = self._in_blocks
            # summing B as a (1×B)@(B×C) product: numpy's reduce over a middle axis with an inner
            # run of C=8 is ~3x slower than the batched matmul
            per_key = (np.ones(b_n) @ folded.reshape(-1, b_n, c_n)).reshape(len(folded), -1)
        for k, f in enumerate(folded):
            z = self._route @ f  # (bytes entering at each proxy NIC port), then per cable pair
            y[k, :p] = z[:p] if self._in_blocks is None else np.bincount(ports, per_key[k], minlength=p)
            y[k, p:] = np.bincount(self._out_pos, weights=to_rank[k, self._out_ranks], minlength=p)
            cab = np.concatenate(
                [
                    np.bincount(self._pair_up, z[p:], minlength=n_links),
                    np.bincount(self._pair_dn, z[p:], minlength=n_links),
                ]
            )
            y[k] += self.cable_ends @ cab
        return PortBytes(in_bytes=y[:, :p].copy(), out_bytes=y[:, p:].copy())

    def _fold(self, t: FloatArray) -> FloatArray:
        """(R, R) or (K, R, R) → (K, hosts·R) float64: each source host's senders summed (in the
        input's own precision: a float32 matrix is read at half the bytes)."""
        r = self.placement.world_size
        if t.shape[-2:] != (r, r):
            raise ValueError(f"traffic matrix shape {t.shape} does not match the rank map's world of {r}")
        stack = t.reshape(-1, r, r)
        n_h = len(self._fold_rows)
        if not n_h:
            return np.zeros((len(stack), 0))
        if self._fold_contiguous and len(set(map(len, self._fold_rows))) == 1:
            # (1×g)@(g×R) per host: BLAS reads the g sender rows once (faster than .sum(axis=2))
            per_host = stack[:, : len(self._fold_order)].reshape(len(stack) * n_h, -1, r)
            folded = np.ones(per_host.shape[1], dtype=per_host.dtype) @ per_host
        else:
            folded = np.add.reduceat(stack[:, self._fold_order], self._fold_starts, axis=1)
        return np.ascontiguousarray(folded.reshape(len(stack), -1), dtype=np.float64)


class ProjectorCache:
    """Projectors keyed by (port-index version, rank-map hash, routing): routing is built once."""

    def __init__(self, max_entries: int = 8) -> None:
        self.max_entries = max_entries
        self._items: OrderedDict[tuple[str, str, Routing], Projector] = OrderedDict()

    def get(self, layout: FabricLayout, placement: RankPlacement, routing: Routing) -> Projector:
        key = (layout.index.version, placement.key, routing)
        hit = self._items.get(key)
        if hit is not None and hit.layout is layout:
            self._items.move_to_end(key)
            return hit
        proj = Projector(layout, placement, routing)
        self._items[key] = proj
        while len(self._items) > self.max_entries:
            self._items.popitem(last=False)
        return proj
