"""Collective algorithms on the run's placement: step counts, and the bytes each schedule puts on
every port (the schedule's rank×rank matrix, routed by the phases projector).

    ring (rank order)   one ring i → i+1 carries everything: 2(N−1) steps for all-reduce
    ring (rail-aligned) NCCL's channels: one ring per local GPU index c, crossing hosts only on
                        rail c (host h's GPU c → host h+1's GPU c), each carrying S/n_local
    tree                NCCL's double binary tree over hosts (the second mirrored, so a host is
                        interior in at most one), each carrying S/2 up (reduce) and down
                        (broadcast): ≈ 2⌈log2 N⌉ steps
    direct (all-to-all) every rank to every rank at once: the measured matrix, 1 round of N−1 sends
    hierarchical        regroup inside the host by destination local index (NVLink), then one
                        rail-aligned inter-host all-to-all among same-index GPUs: 2 rounds

Step counts (fabric_model.md §2): N = 256 → ring 510, tree 16.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fabricmon.core.phases.projector import Projector
from fabricmon.core.whatif import rank_matrix as rm
from fabricmon.core.whatif.terrace_run import by_group_rows

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def ring_steps(n: int, collective: str = "allreduce") -> int:
    """Latency steps of a ring: 2(N−1) for all-reduce, N−1 for reduce-scatter / all-gather."""
    return 2 * (n - 1) if collective == "allreduce" else n - 1


def tree_steps(n: int, collective: str = "allreduce") -> int:
    """A binary tree's depth both ways (reduce up, broadcast down): 2⌈log2 N⌉; one way otherwise."""
    depth = math.ceil(math.log2(n)) if n > 1 else 0
    return 2 * depth if collective == "allreduce" else depth


def alltoall_steps(n: int, n_hosts: int, schedule: str) -> int:
    """Rounds of an all-to-all: direct is one round of N−1 concurrent sends; hierarchical two."""
    return 1 if schedule == "direct" else 2


@dataclass(frozen=True)
class Ranks:
    """Where each rank sits: host number and GPU index inside the host (-1: not placed)."""

    host: IntArray
    local: IntArray

    @property
    def n(self) -> int:
        return len(self.host)

    def at(self) -> dict[tuple[int, int], int]:
        return {(int(h), int(c)): r for r, (h, c) in enumerate(zip(self.host, self.local, strict=True))
                if h >= 0}

    def table(self) -> IntArray:
        """(host, local index) → rank, -1 where no rank sits."""
        placed = self.host >= 0
        t = np.full((int(self.host.max()) + 1, int(self.local.max()) + 1), -1, dtype=np.int64)
        t[self.host[placed], self.local[placed]] = np.flatnonzero(placed)
        return t

    def hosts(self) -> list[int]:
        return sorted({int(h) for h in self.host if h >= 0})


# a schedule as adds onto zeros: (sources, destinations, bytes), the pairs of one add distinct
Cells = list[tuple[IntArray, IntArray, FloatArray | float]]


def dense(cells: Cells, n: int) -> FloatArray:
    """The n×n matrix of a schedule's cells."""
    m = np.zeros((n, n))
    for a, b, v in cells:
        _add_pairs(m, a, b, v)
    return m


def ring_rank_order(ranks: Ranks, bytes_per_rank: float, collective: str = "allreduce") -> FloatArray:
    """One ring in rank order: each rank sends factor·S to the next."""
    return dense(ring_rank_order_cells(ranks, bytes_per_rank, collective), ranks.n)


def ring_rank_order_cells(ranks: Ranks, bytes_per_rank: float, collective: str = "allreduce") -> Cells:
    n = ranks.n
    factor = (2 if collective == "allreduce" else 1) * (n - 1) / n
    return [(np.arange(n), (np.arange(n) + 1) % n, factor * bytes_per_rank)]


def _same_index_edges(ranks: Ranks, pairs: list[tuple[int, int]], c: int) -> tuple[IntArray, IntArray]:
    """Ranks on GPU index ``c`` of each (host a, host b) pair (host positions), where both exist."""
    table, hosts = ranks.table(), np.asarray(ranks.hosts(), dtype=np.int64)
    if not pairs or c >= table.shape[1]:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    p = np.asarray(pairs, dtype=np.int64)
    a, b = table[hosts[p[:, 0]], c], table[hosts[p[:, 1]], c]
    ok = (a >= 0) & (b >= 0) & (a != b)
    return a[ok], b[ok]


def ring_rail_aligned(ranks: Ranks, bytes_per_rank: float, collective: str = "allreduce") -> FloatArray:
    """n_local rings, ring c crossing from host h to host h+1 on GPU c (the intra-host part of each
    ring is NVLink and left out: this is the network matrix)."""
    return dense(ring_rail_aligned_cells(ranks, bytes_per_rank, collective), ranks.n)


def ring_rail_aligned_cells(ranks: Ranks, bytes_per_rank: float, collective: str = "allreduce") -> Cells:
    n, k = ranks.n, len(ranks.hosts())
    factor = (2 if collective == "allreduce" else 1) * (n - 1) / n
    locals_ = sorted({int(c) for c in ranks.local if c >= 0})
    out: Cells = []
    for c in locals_:
        a, b = _same_index_edges(ranks, [(i, (i + 1) % k) for i in range(k)], c)
        out.append((a, b, factor * bytes_per_rank / len(locals_)))
    return out


def _add_pairs(m: FloatArray, a: IntArray, b: IntArray, value: FloatArray | float) -> None:
    """m[a, b] += value. The pairs of one add are distinct (every builder's edges are: one per
    child, host or ring position), so a plain fancy add is exact (``np.add.at`` is ~50× slower)."""
    m[a, b] += value


def _tree_edges(k: int, mirrored: bool) -> list[tuple[int, int]]:
    """(child, parent) positions of a binary heap tree over k nodes (mirrored: positions reversed)."""
    order = list(range(k))[::-1] if mirrored else list(range(k))
    return [(order[i], order[(i - 1) // 2]) for i in range(1, k)]


def double_binary_tree(ranks: Ranks, bytes_per_rank: float) -> FloatArray:
    """Two trees over hosts, each S/2 each way per edge; tree t uses GPU t mod n_local of each host."""
    return dense(double_binary_tree_cells(ranks, bytes_per_rank), ranks.n)


def double_binary_tree_cells(ranks: Ranks, bytes_per_rank: float) -> Cells:
    k = len(ranks.hosts())
    locals_ = sorted({int(c) for c in ranks.local if c >= 0})
    out: Cells = []
    for t in (0, 1):
        a, b = _same_index_edges(ranks, _tree_edges(k, mirrored=bool(t)), locals_[t % len(locals_)])
        out += [(a, b, bytes_per_rank / 2), (b, a, bytes_per_rank / 2)]  # reduce up, broadcast down
    return out


def hierarchical_alltoall(ranks: Ranks, traffic: FloatArray) -> tuple[FloatArray, float]:
    """The inter-host stage of a 2D all-to-all (bytes s→d re-sent from the GPU on s's host with d's
    local index), and the NVLink bytes of the regrouping stage::

        F[h, d] = Σ_{s on h} T[s, d]   →   m[rank(h, local(d)), d] = F[h, d]   for h ≠ host(d)
    """
    cells, nvlink = hierarchical_alltoall_cells(ranks, traffic)
    return dense(cells, len(traffic)), nvlink


def hierarchical_alltoall_cells(ranks: Ranks, traffic: rm.RankMatrix) -> tuple[Cells, float]:
    """:func:`hierarchical_alltoall` as the stage's cells (hosts × ranks of them, not R²);
    ``traffic`` dense or sparse (``rank_matrix``)."""
    table = ranks.table()
    placed = np.flatnonzero(ranks.host >= 0)
    t = traffic if rm.is_sparse(traffic) else np.asarray(traffic, dtype=np.float64)
    host, local = ranks.host, ranks.local
    if len(placed) == t.shape[0]:
        sub = t
    else:
        sub = t[placed][:, placed] if rm.is_sparse(t) else t[np.ix_(placed, placed)]
    f = by_group_rows(sub, host[placed], table.shape[0])  # (hosts, placed)
    g = by_group_rows(sub, local[placed], table.shape[1])  # (locals, placed)
    dst = placed
    h = np.arange(table.shape[0])[:, None]
    proxy = table[h, local[dst][None, :]]  # (hosts, placed): the GPU of host h on d's index
    ok = (proxy >= 0) & (h != host[dst][None, :])
    cells: Cells = [(proxy[ok], np.broadcast_to(dst[None, :], proxy.shape)[ok], f[ok])]
    j = np.arange(len(dst))
    cross = float(rm.total(sub) - f[host[dst], j].sum())
    same_index_cross = float((g[local[dst], j] - rm.diagonal(t)[dst]).sum())
    return cells, cross - same_index_cross


def link_loads(projector: Projector, schedules: dict[str, rm.RankMatrix | Cells], port_names: list[str],
               top: int = 5) -> dict[str, dict[str, object]]:
    """Per schedule (an R×R matrix, or its cells): ports used, peak and mean port load (bytes,
    busier direction), the busiest ports by name, and the bytes on spine-facing cables. Cells are
    written into one reused R×R buffer and cleared after their projection (a fresh R×R array per
    schedule costs its page faults: 134 MB at 4,096 ranks)."""
    out: dict[str, dict[str, object]] = {}
    up = ~projector.layout.index.host_facing
    buffer: FloatArray | None = None
    pxn = projector.routing.mode == "pxn"
    for name, matrix in schedules.items():  # one at a time: each is R×R (134 MB at 4,096 ranks)
        if isinstance(matrix, list) and pxn:
            # PXN folds over each source host's senders: the cells go straight to the folded flows
            src = np.concatenate([a for a, _, _ in matrix]) if matrix else np.zeros(0, np.int64)
            dst = np.concatenate([b for _, b, _ in matrix]) if matrix else np.zeros(0, np.int64)
            val = (np.concatenate([np.broadcast_to(np.asarray(v, dtype=np.float64), a.shape)
                                   for a, _, v in matrix]) if matrix else np.zeros(0))
            load = projector.project_folded(projector.fold_cells(src, dst, val)).load_bytes[0]
        elif isinstance(matrix, list):
            if buffer is None:
                buffer = np.zeros((projector.placement.world_size,) * 2)
            for a, b, v in matrix:
                _add_pairs(buffer, a, b, v)
            load = projector.project(buffer).load_bytes
            for a, b, _ in matrix:
                buffer[a, b] = 0.0
        else:
            load = rm.project_load(projector, matrix)
        used = load > 0
        order = np.argsort(load)[::-1][:top]
        out[name] = {
            "ports_used": int(used.sum()),
            "peak_bytes": float(load.max()) if len(load) else 0.0,
            "mean_used_bytes": float(load[used].mean()) if used.any() else 0.0,
            "uplink_bytes": float(load[up].sum()),
            "busiest": [{"port": port_names[p], "bytes": float(load[p])} for p in order if load[p] > 0],
        }
    return out


def ranks_of(projector: Projector) -> Ranks:
    """Host and local index of every rank of the projector's placement."""
    g = projector.placement.gpu_of_rank
    lay = projector.layout
    placed = g >= 0
    return Ranks(np.where(placed, lay.gpu_host[np.maximum(g, 0)], -1),
                 np.where(placed, lay.gpu_local[np.maximum(g, 0)], -1))


def collectives_figure_values(projector: Projector, alltoall: rm.RankMatrix | None,
                              measured_bytes: dict[str, float], port_names: list[str]) -> dict[str, object]:
    """Step counts and per-port loads of every schedule on this placement.

    All-reduce / reduce-scatter / all-gather loads are per byte of the per-rank buffer S (they are
    linear in S), and in bytes where the run's traces timed that collective (``measured_bytes``).
    The all-to-all schedules route the run's measured dispatch matrix (per step, mean of layers).
    """
    ranks = ranks_of(projector)
    n, n_hosts = ranks.n, len(ranks.hosts())
    unit = 1.0
    schedules: dict[str, rm.RankMatrix | Cells] = {
        "allreduce ring (rank order)": ring_rank_order_cells(ranks, unit),
        "allreduce ring (rail-aligned)": ring_rail_aligned_cells(ranks, unit),
        "allreduce tree (double binary)": double_binary_tree_cells(ranks, unit),
        "allgather ring (rail-aligned)": ring_rail_aligned_cells(ranks, unit, "allgather"),
    }
    nvlink = 0.0
    if alltoall is not None:
        schedules["alltoall direct"] = alltoall
        schedules["alltoall hierarchical"], nvlink = hierarchical_alltoall_cells(ranks, alltoall)
    loads = link_loads(projector, schedules, port_names)
    steps = {
        "allreduce ring (rank order)": ring_steps(n), "allreduce ring (rail-aligned)": ring_steps(n),
        "allreduce tree (double binary)": tree_steps(n),
        "allgather ring (rail-aligned)": ring_steps(n, "allgather"),
        "alltoall direct": alltoall_steps(n, n_hosts, "direct"),
        "alltoall hierarchical": alltoall_steps(n, n_hosts, "hierarchical"),
    }
    rows = []
    for name, load in loads.items():
        kind = name.split()[0]
        per = "byte" if kind == "alltoall" else "byte of S"
        scale = measured_bytes.get(kind) if kind != "alltoall" else 1.0
        rows.append({"schedule": name, "steps": steps[name], "unit": f"bytes per {per}", **load,
                     "peak_bytes_measured_size": load["peak_bytes"] * scale if scale else None})  # type: ignore[operator]
    return {"world": n, "hosts": n_hosts, "schedules": rows, "hierarchical_nvlink_bytes": nvlink,
            "measured_sizes": measured_bytes,
            "reference_steps_256": {"ring": ring_steps(256), "tree": tree_steps(256)}}
