"""Route GPU×GPU byte matrices onto switch ports (PXN on-rail, or ECMP through the spines).

Paths on a two-tier rail-optimized fabric::

    PXN   src GPU ══NVLink══▶ proxy GPU (same server, NIC on the destination's leaf)
          proxy NIC ─▶ [leaf port in] leaf [port out] ─▶ dst NIC           (2 port-hops, no spine)
    ECMP  src NIC ─▶ [leaf in] leaf [uplink out] ─▶ [spine in] spine [down out]
                 ─▶ [leaf in] leaf [out] ─▶ dst NIC
          (same-leaf pairs take the 2-hop path; uplink and spine downlink chosen by a hash of (src, dst))

Same-server traffic never touches the network. Routing is precomputed once into an incidence list
(NIC pair → first/last hop port, chosen cables), so routing one phase is a few ``np.bincount`` — no
per-port Python loops.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

# The ECMP hash model is the product's (core) so the twin and projection route alike by design.
from fabricmon.core.phases.routing import splitmix64
from fabricmon.core.topology.port_index import PortIndex
from fabricmon.core.topology.spec import FabricSpec

RoutingMode = Literal["pxn", "ecmp"]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]



@dataclass(frozen=True)
class PortBytes:
    """Bytes per port (PortIndex order) entering and leaving the switch."""

    in_bytes: FloatArray
    out_bytes: FloatArray


class Wiring:
    """Where every NIC and cable lands in the port index, and what each port faces (its ifAlias)."""

    def __init__(self, fabric: FabricSpec, index: PortIndex) -> None:
        self.fabric, self.index = fabric, index
        ifindex_of: dict[tuple[str, str], int] = {
            (sw.name, p.name): p.ifindex for sw in fabric.switches for p in sw.ports
        }
        self.role = {sw.name: sw.role for sw in fabric.switches}

        def pos(switch: str, port: str) -> int:
            try:
                return index.position(switch, ifindex_of[(switch, port)])
            except KeyError as exc:
                raise ValueError(f"cabling names unknown port {switch}:{port}") from exc

        gpu_host: list[int] = []
        gpu_local: list[int] = []
        nic_pos: list[int] = []
        rails: list[int] = []
        nic_switch: list[str] = []
        self.peer = [""] * len(index)
        self.gpu_labels: list[str] = []
        self.host_start: list[int] = []
        for h, host in enumerate(fabric.hosts):
            self.host_start.append(len(gpu_host))
            for g in sorted(host.gpus, key=lambda g: g.index):
                p = pos(g.switch, g.port)
                gpu_host.append(h)
                gpu_local.append(g.index)
                nic_pos.append(p)
                nic_switch.append(g.switch)
                rails.append(g.rail)
                self.peer[p] = f"{host.name} gpu{g.index} {g.nic}"
                self.gpu_labels.append(f"{host.name} gpu{g.index}")
        self.gpu_host = np.asarray(gpu_host, dtype=np.int64)
        self.gpu_local = np.asarray(gpu_local, dtype=np.int64)
        self.gpu_rail = np.asarray(rails, dtype=np.int64)
        self.nic_pos = np.asarray(nic_pos, dtype=np.int64)
        self.leaf_names = sorted(set(nic_switch) | {sw.name for sw in fabric.switches if sw.role == "leaf"})
        self.spine_names = sorted(sw.name for sw in fabric.switches if sw.role == "spine")
        leaf_id = {n: i for i, n in enumerate(self.leaf_names)}
        spine_id = {n: i for i, n in enumerate(self.spine_names)}
        self.nic_leaf = np.asarray([leaf_id[s] for s in nic_switch], dtype=np.int64)

        # Leaf↔spine cables as parallel arrays: (leaf, leaf port, spine, spine port).
        links: list[tuple[int, int, int, int]] = []
        for ln in fabric.links:
            a_pos, b_pos = pos(ln.a_switch, ln.a_port), pos(ln.b_switch, ln.b_port)
            self.peer[a_pos] = f"{ln.b_switch}:{ln.b_port}"
            self.peer[b_pos] = f"{ln.a_switch}:{ln.a_port}"
            if self.role[ln.a_switch] == "leaf" and self.role[ln.b_switch] == "spine":
                links.append((leaf_id[ln.a_switch], a_pos, spine_id[ln.b_switch], b_pos))
            elif self.role[ln.b_switch] == "leaf" and self.role[ln.a_switch] == "spine":
                links.append((leaf_id[ln.b_switch], b_pos, spine_id[ln.a_switch], a_pos))
        self.link = np.asarray(links, dtype=np.int64).reshape(-1, 4)

    @property
    def n_gpus(self) -> int:
        return len(self.gpu_host)


class Router:
    """Precomputed routing of GPU-pair bytes onto port slots for one mode.

    Traffic comes as EP-group blocks (twin/moe.py): ``(groups, G, G)``, group g = ranks
    [g·G, (g+1)·G), or one ``(N, N)`` matrix when the whole job is one group. Only NIC pairs
    inside a group are listed, so the incidence lists follow groups × G², never N².
    """

    def __init__(self, wiring: Wiring, mode: RoutingMode = "pxn", seed: int = 0,
                 group_gpus: int | None = None) -> None:
        if mode not in ("pxn", "ecmp"):
            raise ValueError(f"routing mode must be 'pxn' or 'ecmp', got {mode!r}")
        self.wiring, self.mode, self.seed = wiring, mode, seed
        w, n = wiring, wiring.n_gpus
        g = group_gpus or n
        if g < 1 or n % g:
            raise ValueError(f"{n} GPUs do not split into groups of {g}")
        self.group_gpus, self.groups = g, n // g
        self.n_ports = len(w.index)
        self._proxy_tables()
        # Source rows of the stacked blocks (groups·G, G), summed per (host, group) segment under
        # PXN (a server's senders fold onto its proxy NIC); one segment per GPU under ECMP.
        if mode == "pxn":
            starts = np.unique(np.concatenate([np.asarray(w.host_start, dtype=np.int64),
                                               np.arange(0, n, g, dtype=np.int64)]))
            starts = starts[starts < n]
        else:
            starts = np.arange(n, dtype=np.int64)
        self.seg_starts = starts
        lengths = np.diff(np.append(starts, n))
        self._seg_len = int(lengths[0]) if len(lengths) and (lengths == lengths[0]).all() else 0
        seg_rank = starts  # a segment's first rank: its host and its group
        seg_host, seg_group = w.gpu_host[seg_rank], seg_rank // g
        local = np.arange(g, dtype=np.int64)
        # every (segment, destination in its group): the source NIC, the destination NIC, and
        # where the pair's bytes are in the per-segment sums (segment · G + local destination)
        dst_nic = (seg_group[:, None] * g + local[None, :]).ravel()
        src_index = np.arange(len(starts) * g, dtype=np.int64)
        src_nic = self.proxy(np.repeat(seg_host, g), dst_nic) if mode == "pxn" else np.repeat(seg_rank, g)
        keep = w.gpu_host[src_nic] != w.gpu_host[dst_nic]  # same-server pairs never use the network
        pairs, first_seen = np.unique(src_nic[keep] * n + dst_nic[keep], return_index=True)
        self.pairs = pairs  # NIC pairs (src · N + dst) that carry bytes, sorted
        self.pair_source = src_index[keep][first_seen]
        self._incidence(pairs // n, pairs % n)

    def _proxy_tables(self) -> None:
        """Per host: its first GPU on each leaf, on each rail, with each local index (PXN proxies)."""
        w, n = self.wiring, self.wiring.n_gpus
        n_hosts = len(w.host_start)
        gpu = np.arange(n, dtype=np.int64)
        rail = np.unique(w.gpu_rail, return_inverse=True)[1].reshape(-1)
        local = np.unique(w.gpu_local, return_inverse=True)[1].reshape(-1)
        self._rail_id, self._local_id = rail, local
        tables = []
        for key, width in ((w.nic_leaf, len(w.leaf_names)), (rail, int(rail.max(initial=-1)) + 1),
                           (local, int(local.max(initial=-1)) + 1)):
            t = np.full((n_hosts, max(1, width)), n, dtype=np.int64)
            np.minimum.at(t, (w.gpu_host, key), gpu)
            tables.append(t)
        first = np.full(n_hosts, n, dtype=np.int64)
        np.minimum.at(first, w.gpu_host, gpu)
        self._by_leaf, self._by_rail, self._by_local = tables
        self._first = np.where(first == n, 0, first)

    def proxy(self, host: IntArray, dst: IntArray) -> IntArray:
        """PXN proxy: for source host a and destination GPU d, the GPU of host a whose NIC sits on
        d's leaf (else on d's rail, else with d's local index, else the host's first GPU)."""
        w, n = self.wiring, self.wiring.n_gpus
        p = self._by_leaf[host, w.nic_leaf[dst]]
        p = np.where(p == n, self._by_rail[host, self._rail_id[dst]], p)
        p = np.where(p == n, self._by_local[host, self._local_id[dst]], p)
        return np.where(p == n, self._first[host], p)

    def _incidence(self, src: IntArray, dst: IntArray) -> None:
        """Per NIC pair: first/last hop ports and, for cross-leaf pairs, the chosen up/down cables."""
        w = self.wiring
        self.first_hop, self.last_hop = w.nic_pos[src], w.nic_pos[dst]
        l1, l2 = w.nic_leaf[src], w.nic_leaf[dst]
        self.cross = np.flatnonzero(l1 != l2)
        self.up = self.down = np.zeros(0, dtype=np.int64)
        if len(self.cross):
            if not len(w.link):
                raise ValueError("traffic between leaves but the fabric has no leaf–spine links")
            c = self.cross
            key = (src[c].astype(np.uint64) << np.uint64(32)) | dst[c].astype(np.uint64)
            h1 = splitmix64(key ^ np.uint64(self.seed))
            h2 = splitmix64(h1)
            self.up = self._choose(w.link[:, 0], l1[c], l2[c], h1, via_spine=False)
            self.down = self._choose(w.link[:, 2], w.link[self.up, 2], l2[c], h2, via_spine=True)

    def _choose(
        self, owner: IntArray, at: IntArray, to_leaf: IntArray, h: npt.NDArray[np.uint64], *, via_spine: bool
    ) -> IntArray:
        """Hash-pick, per flow, one cable of ``owner == at`` that reaches ``to_leaf``.

        Uplinks: cables of leaf ``at`` whose spine also has a cable to ``to_leaf``.
        Downlinks: cables of spine ``at`` that land on ``to_leaf``.
        """
        w = self.wiring
        n_owner = int(owner.max()) + 1
        n_leaf = len(w.leaf_names)
        # Candidate cable lists per (owner, destination leaf), padded into a dense table.
        spines_of_leaf = [set(w.link[w.link[:, 0] == lf, 2].tolist()) for lf in range(n_leaf)]
        table: list[list[list[int]]] = [[[] for _ in range(n_leaf)] for _ in range(n_owner)]
        for c, (leaf, _lp, spine, _sp) in enumerate(w.link.tolist()):
            if via_spine:
                table[spine][leaf].append(c)
            else:
                for target in range(n_leaf):
                    if spine in spines_of_leaf[target]:
                        table[leaf][target].append(c)
        width = max(1, *(len(cell) for row in table for cell in row))
        dense = np.full((n_owner, n_leaf, width), -1, dtype=np.int64)
        count = np.zeros((n_owner, n_leaf), dtype=np.int64)
        for o, row in enumerate(table):
            for t, cell in enumerate(row):
                dense[o, t, : len(cell)] = cell
                count[o, t] = len(cell)
        cnt = count[at, to_leaf]
        if (cnt == 0).any():
            raise ValueError("some leaf pair has no path through a common spine")
        j = (h % cnt.astype(np.uint64)).astype(np.int64)
        return dense[at, to_leaf, j]

    def blocks(self, traffic: FloatArray) -> FloatArray:
        """``traffic`` as (groups, G, G) blocks: an (N, N) matrix is accepted when the job is one
        group; anything else is a clear error."""
        n, g, k = self.wiring.n_gpus, self.group_gpus, self.groups
        if traffic.ndim == 2:
            if traffic.shape != (n, n):
                raise ValueError(f"traffic matrix shape {traffic.shape} does not match {n} GPUs")
            if k != 1:
                raise ValueError(f"an (N, N) matrix for {k} EP groups of {g} GPUs: "
                                 "route its (groups, G, G) blocks")
            return traffic[None]
        if traffic.shape != (k, g, g):
            raise ValueError(f"traffic blocks shape {traffic.shape} do not match {k} EP groups of {g} GPUs")
        return traffic

    def nic_matrix(self, gpu_bytes: FloatArray) -> FloatArray:
        """GPU×GPU bytes → NIC×NIC bytes actually put on the wire (PXN folds a server's senders).
        Dense: for small fabrics (one (N, N) matrix)."""
        w, n = self.wiring, self.wiring.n_gpus
        if gpu_bytes.shape != (n, n):
            raise ValueError(f"traffic matrix shape {gpu_bytes.shape} does not match {n} GPUs")
        off_host = w.gpu_host[:, None] != w.gpu_host[None, :]
        if self.mode == "ecmp":
            return np.where(off_host, gpu_bytes, 0.0)
        n_hosts = len(w.host_start)
        per_host = np.add.reduceat(gpu_bytes, np.asarray(w.host_start), axis=0)  # (hosts, N)
        per_host[np.arange(n_hosts)[:, None] == w.gpu_host[None, :]] = 0.0
        nic = np.zeros((n, n))
        dst = np.tile(np.arange(n), n_hosts)
        nic[self.proxy(np.repeat(np.arange(n_hosts), n), dst), dst] = per_host.ravel()
        return nic

    @property
    def server_gpus(self) -> int:
        """GPUs per server when this routing reads per-server sums of whole groups (PXN on
        servers of one size inside groups: :meth:`route_sources`), else 0."""
        return self._seg_len if self.mode == "pxn" else 0

    def route(self, traffic: FloatArray) -> PortBytes:
        """Bytes in/out of every port for one phase: its (groups, G, G) blocks, or its (N, N)
        matrix when the job is one group."""
        g = self.group_gpus
        blocks = self.blocks(traffic)
        by_columns = blocks.transpose(0, 2, 1)
        if self.mode == "pxn" and self._seg_len and by_columns.flags.c_contiguous and len(blocks) > 1:
            # laid out transposed (a combine, twin/moe.py): sum each column's host segments where
            # they are contiguous instead of copying the blocks to rows first
            # (k, G, hosts, seg) → (k, hosts, G); einsum, as numpy's sum over a short last axis is
            # several times slower
            per = np.einsum("kdhs->khd", by_columns.reshape(len(blocks), g, -1, self._seg_len))
            source = per.reshape(-1, g)
        elif self.mode == "ecmp":
            source = blocks.reshape(-1, g)  # (N, G): rank r's bytes to each GPU of its group
        elif self._seg_len:
            source = blocks.reshape(len(self.seg_starts), self._seg_len, g).sum(axis=1)
        else:
            source = np.add.reduceat(blocks.reshape(-1, g), self.seg_starts, axis=0)
        return self.route_sources(source)

    def route_sources(self, source: FloatArray) -> PortBytes:
        """Bytes in/out of every port from the sources' sums: (segments, G) — per (server, group)
        under PXN (``twin.moe.LayerTraffic.server_sums``), per GPU under ECMP."""
        w = self.wiring
        want = (len(self.seg_starts), self.group_gpus)
        if source.shape != want:
            raise ValueError(f"source sums shape {source.shape}, expected {want}")
        flat = source.ravel()[self.pair_source]
        p = self.n_ports
        in_b = np.bincount(self.first_hop, weights=flat, minlength=p)
        out_b = np.bincount(self.last_hop, weights=flat, minlength=p)
        if len(self.cross):
            # Bytes per cable, then onto both of its ends:
            # uplink = leaf port out / spine port in; downlink = spine port out / leaf port in.
            link = w.link
            cross = flat[self.cross]
            up = np.bincount(self.up, weights=cross, minlength=len(link))
            down = np.bincount(self.down, weights=cross, minlength=len(link))
            leaf_end, spine_end = link[:, 1], link[:, 3]
            out_b += np.bincount(leaf_end, weights=up, minlength=p)
            out_b += np.bincount(spine_end, weights=down, minlength=p)
            in_b += np.bincount(spine_end, weights=up, minlength=p)
            in_b += np.bincount(leaf_end, weights=down, minlength=p)
        return PortBytes(in_bytes=in_b, out_bytes=out_b)
