"""A placement suggestion under the run's measured matrices: which rank on which GPU of the run's
own nodes, so the bytes the fabric carries — and the hot receivers' incast — shrink.

Two moves, both evaluated by projecting the measured phases through the phases projector:

1. **Host grouping** (swaps between hosts): a rank that exchanges many bytes with another host's
   ranks moves there, trading places with the rank of that host that gains most from the swap.
   Swaps are tried from the heaviest receivers first (where incast comes from); a swap is kept
   only when it captures more bytes inside hosts (NVLink).
2. **Rail slots** (permutation inside each host): ranks are assigned to local GPU indices by a
   linear assignment (Hungarian) that maximises the bytes to same-index GPUs on other hosts —
   the bytes that stay on one rail leaf without a PXN hop or a spine.

The gain is reported as predicted peak port load and uplink bytes before/after, per projection.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.optimize import linear_sum_assignment

from fabricmon.core.phases.layout import FabricLayout, RankPlacement
from fabricmon.core.phases.projector import Projector
from fabricmon.core.phases.routing import Routing
from fabricmon.core.whatif import rank_matrix as rm
from fabricmon.core.whatif.terrace_run import by_group_columns, by_group_rows

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def host_swaps(t: rm.RankMatrix, host: IntArray, max_swaps: int = 64, candidates: int = 64) -> IntArray:
    """Improve the host of each rank by pairwise swaps (sizes per host kept) under the symmetric
    bytes w = t + tᵀ (never formed: a 4,096² float64 transpose costs ~0.3 s).

    Greedy, bounded: at most ``max_swaps`` rounds, each scoring every (hot rank, any rank) swap of
    the ``candidates`` heaviest ranks, O(candidates·R) a round; the affinity table (R × hosts)
    follows each swap in O(R)."""
    host = host.copy()
    n_h = int(host.max()) + 1
    # (R, hosts): bytes between rank r and host h's ranks, both directions (two folds of t)
    aff = by_group_columns(t, host) + by_group_rows(t, host, n_h).T
    diag = 2 * rm.diagonal(t)
    hot = np.argsort(-(rm.row_sums(t) + rm.col_sums(t)))[:candidates]
    tc = t.tocsc() if rm.is_sparse(t) else t  # columns read from the CSC form
    w_hot = rm.rows_dense(t, hot) + rm.rows_dense(tc.T, hot) if rm.is_sparse(t) else t[hot] + t[:, hot].T
    tiny = 1e-9 * max(1.0, float(w_hot.sum()))
    for _ in range(max_swaps):
        own = aff[np.arange(len(host)), host] - diag
        # gain of swapping a (hot) with b: a joins host[b], b joins host[a]
        gain = (aff[hot][:, host] - own[hot][:, None]
                + aff[:, host[hot]].T - own[None, :] - 2 * w_hot)
        gain[host[hot][:, None] == host[None, :]] = -np.inf
        i, j = (int(x) for x in np.unravel_index(int(np.argmax(gain)), gain.shape))
        if not gain[i, j] > tiny:
            break
        a, b = int(hot[i]), j
        ha, hb = int(host[a]), int(host[b])
        # w's two columns: the table follows the swap
        delta = (rm.column(tc, b) + rm.row(t, b)) - (rm.column(tc, a) + rm.row(t, a))
        aff[:, ha] += delta
        aff[:, hb] -= delta
        host[a], host[b] = hb, ha
    return host


def rail_slots(t: rm.RankMatrix, host: IntArray, slots_of_host: dict[int, list[int]], local_of_slot: IntArray,
               rounds: int = 3) -> IntArray:
    """GPU (slot) of every rank: per host, a linear assignment maximising same-local-index bytes
    (w = t + tᵀ) to other hosts' ranks, iterated a few rounds. ``slots_of_host[h]`` are h's GPU ids.

    Each round: two R²×(local indices) products give every rank's bytes per local index, less
    its own host's (from the Σ hosts² same-host cells, gathered once); then one small assignment
    per host."""
    gpu = np.full(len(host), -1, dtype=np.int64)
    for h, slots in slots_of_host.items():  # start: rank order on the host's GPUs
        ranks = np.flatnonzero(host == h)
        gpu[ranks] = slots[: len(ranks)]
    n_local = int(local_of_slot.max()) + 1
    rows, cols = same_group_pairs(host)
    own_w = rm.gather(t, rows, cols) + rm.gather(t, cols, rows)
    groups = [(np.flatnonzero(host == h), np.asarray(ids)) for h, ids in slots_of_host.items()]
    r = len(host)
    for _ in range(rounds):
        local = local_of_slot[gpu]
        member = np.zeros((r, n_local))
        member[np.arange(r), local] = 1.0
        own = np.bincount(rows * n_local + local[cols], weights=own_w, minlength=r * n_local)
        # (R, local index): bytes of each rank to other hosts' ranks there
        into_cols = (t.T @ member) if rm.is_sparse(t) else (member.T @ t).T
        score = t @ member + into_cols - own.reshape(r, n_local)
        for ranks, slot_ids in groups:
            r_i, s_i = linear_sum_assignment(-score[ranks][:, local_of_slot[slot_ids]])
            gpu[ranks[r_i]] = slot_ids[s_i]
    return gpu


def same_group_pairs(group: IntArray) -> tuple[IntArray, IntArray]:
    """Every (i, j) with group[i] == group[j] (i == j included): Σ sizes² pairs, sorted by group."""
    order = np.argsort(group, kind="stable")
    sorted_ = group[order]
    starts = np.flatnonzero(np.concatenate([[True], sorted_[1:] != sorted_[:-1]])) if len(order) else order
    sizes = np.diff(np.concatenate([starts, [len(order)]]))
    size_of = np.repeat(sizes, sizes)  # per sorted position: its group's size
    start_of = np.repeat(starts, sizes)
    rows = np.repeat(order, size_of)
    first = np.repeat(np.cumsum(size_of) - size_of, size_of)  # where each row's run begins
    cols = order[np.repeat(start_of, size_of) + np.arange(len(rows)) - first]
    return rows, cols


def same_group_bytes(t: rm.RankMatrix, group: IntArray) -> float:
    """Σ t[i, j] over pairs in the same group: the diagonal blocks of equal contiguous groups, the
    gathered pairs when they are few, else a product with the groups' membership (a sparse
    matrix: over its cells)."""
    r = len(group)
    if not r:
        return 0.0
    if rm.is_sparse(t):
        return rm.same_group_sum(t, group)
    n = int(group.max()) + 1
    g = r // n
    if g * n == r and np.array_equal(group, np.repeat(np.arange(n), g)):
        idx = np.arange(n)
        return float(t.reshape(n, g, n, g)[idx, :, idx, :].sum())
    sizes = np.bincount(group).astype(np.int64)
    if int((sizes**2).sum()) <= r * r // 4:
        rows, cols = same_group_pairs(group)
        return float(t[rows, cols].sum())
    member = np.zeros((r, n))
    member[np.arange(r), group] = 1.0
    return float((t @ member)[np.arange(r), group].sum())


ProjectorFactory = Callable[[FabricLayout, RankPlacement, Routing], Projector]


def suggest(layout: FabricLayout, placement: RankPlacement, stack: Sequence[rm.RankMatrix],
            routing: Routing, *, projector: ProjectorFactory = Projector,
            total: rm.RankMatrix | None = None) -> dict[str, Any]:
    """A suggested rank → GPU map on the run's own GPUs, with predicted peak and uplink bytes.
    ``stack``: the per-(layer, phase) matrices (an array or a list); ``total`` their sum, if known.

    Cost (R ranks, H hosts, L local indices): host swaps ≤ 64 rounds over 64 candidates, O(64·64·R);
    rail slots 3 rounds of one R²·L product and H assignments of L×L; two projections (the
    suggestion's only when it moves fewer bytes)."""
    g0 = placement.gpu_of_rank
    if (g0 < 0).any():
        return {"error": "the rank map does not place every rank; no suggestion"}
    if total is None:
        total = sum_of(stack)

    host0 = layout.gpu_host[g0]
    hosts = sorted(set(host0.tolist()))
    slots_of_host = {h: sorted(int(g) for g in g0[host0 == h]) for h in hosts}
    host1 = host_swaps(total, host0)
    gpu1 = rail_slots(total, host1, slots_of_host, layout.gpu_local)
    suggested = RankPlacement(gpu1)
    all_bytes = rm.total(total)

    def bytes_of(p: RankPlacement) -> dict[str, float]:
        """Bytes between hosts, and between hosts on different rails (their same-group cells)."""
        h, r = layout.gpu_host[p.gpu_of_rank], layout.gpu_rail[p.gpu_of_rank]
        same_host = same_group_bytes(total, h)
        same_rail = same_group_bytes(total, r)
        _, hr = np.unique(h * (int(r.max()) + 1) + r, return_inverse=True)  # (host, rail) as one key
        both = same_group_bytes(total, hr.reshape(-1).astype(np.int64))
        return {"network_bytes": all_bytes - same_host,
                "cross_rail_bytes": all_bytes - same_host - same_rail + both}

    def ports_of(p: RankPlacement) -> dict[str, float]:
        proj = projector(layout, p, routing)
        loads = np.stack([rm.project_load(proj, m) for m in stack])  # one phase at a time: no stacked copy
        up = ~layout.index.host_facing
        return {"peak_port_bytes": float(loads.max()), "uplink_bytes": float(loads[:, up].sum())}

    before = {**ports_of(placement), **bytes_of(placement)}
    after = bytes_of(suggested)
    fewer = (after["network_bytes"] < before["network_bytes"]
             or after["cross_rail_bytes"] < before["cross_rail_bytes"])
    # the suggested placement is projected only when it moves fewer bytes (the projector is built
    # per placement: about a second at 4,096 ranks)
    after = {**(ports_of(suggested) if fewer else {"peak_port_bytes": math.nan, "uplink_bytes": math.nan}),
             **after}
    moved = int((gpu1 != g0).sum())
    gain = {k: (before[k] - after[k]) / before[k] if before[k] > 0 and math.isfinite(after[k]) else 0.0
            for k in before}
    better = fewer and after["peak_port_bytes"] <= before["peak_port_bytes"]
    return {"before": before, "after": after, "relative_gain": gain, "ranks_moved": moved,
            "suggest": bool(better and moved),
            "gpu_of_rank": gpu1.tolist() if better and moved else None,
            "hosts": [layout.host_names[h] for h in hosts]}


def sum_of(mats: Sequence[rm.RankMatrix]) -> rm.RankMatrix:
    """Σ of the matrices in order, into one new array (no stacked copy of a list); sparse when
    every one is (the same cell sums), else dense."""
    if len(mats) and all(rm.is_sparse(m) for m in mats):
        acc = mats[0].copy()
        for m in mats[1:]:
            acc = acc + m
        return acc
    if any(rm.is_sparse(m) for m in mats):
        mats = [rm.dense(m) for m in mats]
    if len(mats) == 1:
        return np.array(mats[0], dtype=np.float64, copy=True)
    out = np.add(mats[0], mats[1], dtype=np.float64)
    for m in mats[2:]:
        out += m
    return out


def node_choice(layout: FabricLayout, placement: RankPlacement, total: rm.RankMatrix) -> dict[str, Any]:
    """Which scalable units (hosts sharing the same rail leaves) the run's hosts span, the bytes
    between SUs (they climb to the spines even under PXN), and the fewest SUs that would hold the
    run — filled from those already holding most of its hosts (assumes their other hosts are free)."""
    g = placement.gpu_of_rank
    if (g < 0).any():
        return {"error": "the rank map does not place every rank"}
    leaves_of_host: dict[int, tuple[int, ...]] = {}
    for gpu in range(layout.n_gpus):
        leaves_of_host.setdefault(int(layout.gpu_host[gpu]), ())
        leaves_of_host[int(layout.gpu_host[gpu])] += (int(layout.nic_leaf[gpu]),)
    su_key = {h: tuple(sorted(set(v))) for h, v in leaves_of_host.items()}
    keys = sorted(set(su_key.values()))
    su_of_host = {h: keys.index(k) for h, k in su_key.items()}
    capacity = np.bincount(list(su_of_host.values()), minlength=len(keys))
    host = layout.gpu_host[g]
    run_hosts = sorted(set(host.tolist()))
    su = np.array([su_of_host[int(h)] for h in host], dtype=np.int64)
    held = np.bincount([su_of_host[h] for h in run_hosts], minlength=len(keys))
    order = sorted(range(len(keys)), key=lambda s: (-held[s], -capacity[s], s))
    need, room = [], 0
    for s in order:
        if room >= len(run_hosts):
            break
        need.append(s)
        room += int(capacity[s])
    _, dense = np.unique(su, return_inverse=True)
    same_su = same_group_bytes(total, dense.reshape(-1).astype(np.int64)) if len(g) else 0.0
    all_bytes = rm.total(total)
    return {"scalable_units": len(keys), "run_hosts": len(run_hosts),
            "run_spans_sus": int((held > 0).sum()), "fewest_sus": len(need),
            "suggested_sus": [f"su{s}" for s in need],
            "cross_su_share": max(0.0, (all_bytes - same_su) / all_bytes) if all_bytes > 0 else 0.0}
