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
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.optimize import linear_sum_assignment

from fabricmon.core.phases.layout import FabricLayout, RankPlacement
from fabricmon.core.phases.projector import Projector
from fabricmon.core.phases.routing import Routing
from whatif_reference.terrace_run import by_group_columns

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def host_swaps(w: FloatArray, host: IntArray, max_swaps: int = 64, candidates: int = 64) -> IntArray:
    """Improve the host of each rank by pairwise swaps (sizes per host kept). ``w`` symmetric bytes."""
    host = host.copy()
    aff = by_group_columns(w, host)  # (R, hosts): bytes between rank r and host h's ranks (one read)
    diag = np.diag(w).copy()
    hot = np.argsort(-w.sum(axis=1))[:candidates]
    w_hot = w[hot]
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
        delta = w[:, b] - w[:, a]  # the affinity table follows the swap: two columns change
        aff[:, ha] += delta
        aff[:, hb] -= delta
        host[a], host[b] = hb, ha
    return host


def rail_slots(w: FloatArray, host: IntArray, slots_of_host: dict[int, list[int]], local_of_slot: IntArray,
               rounds: int = 3) -> IntArray:
    """GPU (slot) of every rank: per host, a linear assignment maximising same-local-index bytes
    to other hosts' ranks, iterated a few rounds. ``slots_of_host[h]`` are h's GPU ids."""
    gpu = np.full(len(host), -1, dtype=np.int64)
    for h, slots in slots_of_host.items():  # start: rank order on the host's GPUs
        ranks = np.flatnonzero(host == h)
        gpu[ranks] = slots[: len(ranks)]
    n_local = int(local_of_slot.max()) + 1
    for _ in range(rounds):
        local = local_of_slot[gpu]
        member = np.zeros((len(host), n_local))
        member[np.arange(len(host)), local] = 1.0
        for h, slots in slots_of_host.items():
            ranks = np.flatnonzero(host == h)
            others = host != h
            # bytes of each of h's ranks to other hosts' ranks at each local index
            score = w[np.ix_(ranks, np.flatnonzero(others))] @ member[others]
            cost = -score[:, local_of_slot[slots]]
            r_i, s_i = linear_sum_assignment(cost)
            gpu[ranks[r_i]] = np.asarray(slots)[s_i]
    return gpu


ProjectorFactory = Callable[[FabricLayout, RankPlacement, Routing], Projector]


def suggest(layout: FabricLayout, placement: RankPlacement, stack: FloatArray, routing: Routing,
            projector: ProjectorFactory = Projector) -> dict[str, Any]:
    """A suggested rank → GPU map on the run's own GPUs, with predicted peak and uplink bytes."""
    g0 = placement.gpu_of_rank
    if (g0 < 0).any():
        return {"error": "the rank map does not place every rank; no suggestion"}
    total = stack.sum(axis=0)
    w = total + total.T
    host0 = layout.gpu_host[g0]
    hosts = sorted(set(host0.tolist()))
    slots_of_host = {h: sorted(int(g) for g in g0[host0 == h]) for h in hosts}
    host1 = host_swaps(w, host0)
    gpu1 = rail_slots(w, host1, slots_of_host, layout.gpu_local)
    suggested = RankPlacement(gpu1)
    all_bytes = float(total.sum())
    ar = np.arange(len(g0))

    def bytes_of(p: RankPlacement) -> dict[str, float]:
        """Bytes between hosts, and between hosts on different rails (one read of T each key)."""
        h, r = layout.gpu_host[p.gpu_of_rank], layout.gpu_rail[p.gpu_of_rank]
        same_host = float(by_group_columns(total, h)[ar, h].sum())
        same_rail = float(by_group_columns(total, r)[ar, r].sum())
        _, hr = np.unique(h * (int(r.max()) + 1) + r, return_inverse=True)  # (host, rail) as one key
        both = float(by_group_columns(total, hr.astype(np.int64))[ar, hr].sum())
        return {"network_bytes": all_bytes - same_host,
                "cross_rail_bytes": all_bytes - same_host - same_rail + both}

    def ports_of(p: RankPlacement) -> dict[str, float]:
        loads = projector(layout, p, routing).project(stack).load_bytes
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


def node_choice(layout: FabricLayout, placement: RankPlacement, total: FloatArray) -> dict[str, Any]:
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
    ar = np.arange(len(g))
    _, dense = np.unique(su, return_inverse=True)
    same_su = float(by_group_columns(total, dense.astype(np.int64))[ar, dense].sum()) if len(g) else 0.0
    all_bytes = float(total.sum())
    return {"scalable_units": len(keys), "run_hosts": len(run_hosts),
            "run_spans_sus": int((held > 0).sum()), "fewest_sus": len(need),
            "suggested_sus": [f"su{s}" for s in need],
            "cross_su_share": max(0.0, (all_bytes - same_su) / all_bytes) if all_bytes > 0 else 0.0}
