"""A regional optical circuit switch (OCS) beside the electrical fabric (EPS), mFabric §4.3.

Circuits per region: Algorithm 1 (ReconfigureOCS) on the duplex demand D with the fixes of
mfabric_locality.md §4.3 — completion time ``D/(C·B + ε)`` so unserved pairs rank by demand
instead of by index, *skip* a pair whose endpoint is out of ports (don't stop), then *fill*
leftover ports by demand, and *repair* a server stranded with ≥ 2 free ports by splitting a circuit
between two others (a,b) into (i,a), (i,b). Dense demand on 8 servers at α = 6 → 24 circuits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from fabricmon.core.whatif.server_cells import ServerCells

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

OCS_PORTS = 500  # an ms-scale OCS (mFabric §4.2)
NICS_PER_SERVER = 8


def port_budget(alpha: int, ocs_ports: int = OCS_PORTS) -> int:
    """Servers one OCS domain covers at optical degree α: floor(ports / α)."""
    return ocs_ports // alpha


def circuits(demand: FloatArray, alpha: int, link_bytes_s: float = 1.0, eps: float = 1e-9) -> IntArray:
    """Circuits per server pair (symmetric, each server ≤ α) for the duplex demand of a region."""
    one: IntArray = circuits_batch(np.asarray(demand, dtype=np.float64)[None], alpha, link_bytes_s, eps)[0]
    return one


def circuits_batch(demand: FloatArray, alpha: int, link_bytes_s: float = 1.0, eps: float = 1e-9,
                   servers: IntArray | None = None) -> IntArray:
    """:func:`circuits` for a stack (B, k, k) of regions at once (one pair per region per round);
    ``servers[b]`` (≤ k) says how many of region b's rows are real (the rest is padding)."""
    n_b, k = demand.shape[:2]
    iu = np.triu_indices(k, 1)
    d = (demand + demand.transpose(0, 2, 1))[:, iu[0], iu[1]]  # (B, pairs) duplex demand
    real = np.ones((n_b, k), dtype=bool) if servers is None else np.arange(k)[None, :] < servers[:, None]
    free = np.where(real, alpha, 0).astype(np.int64)
    c = np.zeros(d.shape, dtype=np.int64)
    rows = np.arange(n_b)

    def add(ok: npt.NDArray[np.bool_], score: FloatArray) -> bool:
        any_ok = ok.any(axis=1)
        if not any_ok.any():
            return False
        p = np.argmax(np.where(ok, score, -1.0), axis=1)
        b = rows[any_ok]
        p = p[any_ok]
        c[b, p] += 1
        free[b, iu[0][p]] -= 1
        free[b, iu[1][p]] -= 1
        return True

    while True:  # Algorithm 1 with ε: the pair of longest completion time that has ports at both ends
        both = (free[:, iu[0]] > 0) & (free[:, iu[1]] > 0)
        if not add(both & (d > 0), d / (c * link_bytes_s + eps * (1 + d))):
            break
    while True:  # fill: leftover ports to pairs that both have some, by demand
        both = (free[:, iu[0]] > 0) & (free[:, iu[1]] > 0)
        if not add(both, d + 1.0):
            break
    out = np.zeros((n_b, k, k), dtype=np.int64)
    out[:, iu[0], iu[1]] = c
    stranded = np.flatnonzero((free >= 2).any(axis=1))
    if len(stranded):
        dd = demand[stranded] + demand[stranded].transpose(0, 2, 1)
        dd[:, np.arange(k), np.arange(k)] = 0.0
        sub, sub_free = out[stranded], free[stranded]
        _repair_batch(sub, sub_free, dd)
        out[stranded] = sub
    return out + out.transpose(0, 2, 1)


def _repair_batch(c: IntArray, free: IntArray, dd: FloatArray) -> None:
    """In place, for a stack (B, k, k) of upper-triangular circuit counts: a server left with ≥ 2
    free ports takes over a circuit (a, b) between two others — (i,a), (i,b) — the circuit whose
    ends i exchanges most duplex demand ``dd`` with (the first such in row-major order). Servers are
    served in index order, each until it has < 2 free ports or no circuit is left to split. Every
    region advances one repair per round (rounds = the most repairs any region needs, ≤ α·k/2)."""
    n_b, k = free.shape
    rows = np.arange(n_b)
    done = np.zeros((n_b, k), dtype=bool)  # servers with no circuit left to take over
    while True:
        want = (free >= 2) & ~done
        active = np.flatnonzero(want.any(axis=1))
        if not len(active):
            return
        i = np.argmax(want[active], axis=1)  # the lowest stranded server of each region
        ci = c[active]
        ok = ci > 0
        ok[rows[: len(active)], i, :] = False  # circuits not touching i
        ok[rows[: len(active)], :, i] = False
        d_i = dd[active, i, :]  # (A, k): demand between i and each server
        score = np.where(ok, d_i[:, :, None] + d_i[:, None, :], -np.inf).reshape(len(active), -1)
        best = np.argmax(score, axis=1)
        has = ok.reshape(len(active), -1)[rows[: len(active)], best]
        done[active[~has], i[~has]] = True
        b_, i_, p = active[has], i[has], best[has]
        a, b = p // k, p % k
        c[b_, a, b] -= 1
        for x in (a, b):
            c[b_, np.minimum(i_, x), np.maximum(i_, x)] += 1
        free[b_, i_] -= 2


@dataclass(frozen=True)
class PhaseTimes:
    ocs_s: float
    eps_s: float
    mix_s: float
    fat_tree_s: float
    on_circuits: float  # share of inter-server bytes on circuits


def phase_times(s: FloatArray, region_of_server: IntArray, alpha: int, link_bytes_s: float,
                fixed: IntArray | None = None) -> PhaseTimes:
    """One phase's server matrix on the mixed fabric (circuits per region, the rest over EPS with
    8−α NICs per server) against a non-blocking fat-tree with all 8. ``fixed``: one static set of
    circuits for every phase (a TopoOpt-like topology) instead of reconfiguring per phase."""
    n = len(s)
    c_all = np.zeros((n, n), dtype=np.int64) if fixed is None else fixed
    for r in np.unique(region_of_server) if fixed is None else ():
        m = np.flatnonzero(region_of_server == r)
        if len(m) < 2:
            continue
        c = circuits(s[np.ix_(m, m)], alpha, link_bytes_s)
        c_all[np.ix_(m, m)] = c
    on = c_all > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        t_pair = np.where(on, np.maximum(s, s.T) / (c_all * link_bytes_s), 0.0)
    ocs = float(t_pair.max()) if on.any() else 0.0
    eps_bytes = np.where(on, 0.0, s)
    eps_lanes = NICS_PER_SERVER - alpha
    eps = (float(max(eps_bytes.sum(axis=1).max(), eps_bytes.sum(axis=0).max())) / (eps_lanes * link_bytes_s)
           if eps_lanes > 0 else (math.inf if eps_bytes.any() else 0.0))
    ft = float(max(s.sum(axis=1).max(), s.sum(axis=0).max())) / (NICS_PER_SERVER * link_bytes_s)
    total = float(s.sum())
    return PhaseTimes(ocs, eps, max(ocs, eps), ft, float(s[on].sum() / total) if total > 0 else math.nan)


# -- cost (mFabric Table 4; fibers priced as TopoOpt: $0.3/m × 500 m) ------------------------------
PRICES: dict[int, dict[str, float]] = {  # link Gb/s → component $
    100: {"transceiver": 99, "nic": 659, "eps_port": 187},
    200: {"transceiver": 239, "nic": 1079, "eps_port": 374},
    400: {"transceiver": 659, "nic": 1499, "eps_port": 1090},
    800: {"transceiver": 1399, "nic": 2248, "eps_port": 1400},
}
OCS_PORT_USD = 520.0
FIBER_USD = 0.3 * 500
# a three-tier fat-tree per host link: 3 cables, a transceiver at each end (6), 6 switch ports
# counted as the note's "12 EPS ports per server for the 2-NIC fat-tree" (mfabric_locality.md §3)
FAT_TREE_PER_NIC = {"transceiver": 6, "eps_port": 6, "fiber": 3}


def cost_per_gpu(gbps: int, alpha: int | None) -> float:
    """Networking $ per GPU (8 GPUs, 8 NICs per server): a full fat-tree (alpha None), or α NICs on
    the OCS (one transceiver, one OCS port, one fiber each) and 8−α on a fat-tree."""
    p = PRICES[gbps]
    ft_nic = (p["nic"] + FAT_TREE_PER_NIC["transceiver"] * p["transceiver"]
              + FAT_TREE_PER_NIC["eps_port"] * p["eps_port"] + FAT_TREE_PER_NIC["fiber"] * FIBER_USD)
    if alpha is None:
        return ft_nic
    ocs_nic = p["nic"] + p["transceiver"] + OCS_PORT_USD + FIBER_USD
    return ((NICS_PER_SERVER - alpha) * ft_nic + alpha * ocs_nic) / NICS_PER_SERVER


def cost_ratio(gbps: int, alpha: int = 6) -> float:
    """Fat-tree : MixNet networking cost."""
    return cost_per_gpu(gbps, None) / cost_per_gpu(gbps, alpha)


def cost_panel(t_ft_s: float, t_mix_s: float, gbps: int, alpha: int) -> dict[str, Any]:
    """Cost efficiency = (t_ft / t_mix) × (cost_ft / cost_mix), for the communication phases only."""
    nearest = min(PRICES, key=lambda g: abs(g - gbps))
    ratio = cost_ratio(nearest, alpha)
    speed = t_ft_s / t_mix_s if t_mix_s > 0 else math.nan
    return {"price_row_gbps": nearest, "cost_per_gpu_fat_tree": cost_per_gpu(nearest, None),
            "cost_per_gpu_mixnet": cost_per_gpu(nearest, alpha), "cost_ratio": ratio,
            "time_ratio_ft_over_mix": speed, "cost_efficiency": speed * ratio}


@dataclass(frozen=True)
class RegionView:
    """What the OCS model reads of a stack of server matrices under one region partition: the
    regions (of ≥ 2 servers), each key's sub-matrix on them, and each server's bytes out / in."""

    regions: list[IntArray]
    kmax: int
    blocks: FloatArray  # (K, regions, kmax, kmax), zero padded
    out_b: FloatArray  # (K, N)
    in_b: FloatArray  # (K, N)


def region_view(server: FloatArray | ServerCells, region_of_server: IntArray) -> RegionView:
    """The :class:`RegionView` of a dense (K, N, N) stack or of its non-zero cells (the same
    numbers: the cells are scattered where the dense gather would read them)."""
    regions = [np.flatnonzero(region_of_server == r) for r in np.unique(region_of_server)]
    regions = [m for m in regions if len(m) > 1]
    kmax = max((len(m) for m in regions), default=0)
    if isinstance(server, ServerCells):
        out_b, in_b = server.row_col_sums()
        return RegionView(regions, kmax, server.blocks(regions, kmax) if kmax else np.zeros(0), out_b, in_b)
    blocks = np.zeros((len(server), len(regions), kmax, kmax))
    for j, m in enumerate(regions):
        blocks[:, j, : len(m), : len(m)] = server[:, m[:, None], m[None, :]]
    return RegionView(regions, kmax, blocks, server.sum(axis=2), server.sum(axis=1))


def phase_times_all(server: FloatArray | ServerCells, region_of_server: IntArray, alpha: int,
                    link_bytes_s: float, fixed: FloatArray | None = None, *,
                    view: RegionView | None = None) -> dict[str, FloatArray]:
    """:func:`phase_times` for a stack (K, N, N) of phases at once: every (phase, region) gets its
    circuits in one :func:`circuits_batch` (or the circuits of ``fixed``, one (N, N) demand whose
    circuits serve every phase: the static topology). Returns per-phase arrays. ``server`` may be
    the stack's non-zero cells; ``view`` its :func:`region_view` when already made."""
    v = view or region_view(server, region_of_server)
    regions, kmax, blocks = v.regions, v.kmax, v.blocks
    n_k, n = v.out_b.shape
    on_out = np.zeros((n_k, n))
    on_in = np.zeros((n_k, n))
    ocs_s = np.zeros(n_k)
    if kmax:
        sizes = np.array([len(m) for m in regions])
        if fixed is None:
            c = circuits_batch(blocks.reshape(-1, kmax, kmax), alpha, link_bytes_s,
                               servers=np.tile(sizes, n_k)).reshape(n_k, len(regions), kmax, kmax)
        else:
            fb = np.zeros((len(regions), kmax, kmax))
            for j, m in enumerate(regions):
                fb[j, : len(m), : len(m)] = fixed[np.ix_(m, m)]
            c = np.broadcast_to(circuits_batch(fb, alpha, link_bytes_s, servers=sizes), blocks.shape)
        on = c > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            t_pair = np.where(on, np.maximum(blocks, blocks.transpose(0, 1, 3, 2)) / (c * link_bytes_s), 0.0)
        ocs_s = t_pair.reshape(n_k, -1).max(axis=1)
        carried = np.where(on, blocks, 0.0)
        for j, m in enumerate(regions):
            on_out[:, m] = carried[:, j, : len(m), : len(m)].sum(axis=2)
            on_in[:, m] = carried[:, j, : len(m), : len(m)].sum(axis=1)
    out_b, in_b = v.out_b, v.in_b
    lanes = NICS_PER_SERVER - alpha
    eps_peak = np.maximum((out_b - on_out).max(axis=1), (in_b - on_in).max(axis=1))
    eps_s = eps_peak / (lanes * link_bytes_s) if lanes > 0 else np.where(eps_peak > 0, np.inf, 0.0)
    ft_s = np.maximum(out_b.max(axis=1), in_b.max(axis=1)) / (NICS_PER_SERVER * link_bytes_s)
    total = out_b.sum(axis=1)
    share = np.divide(on_out.sum(axis=1), total, out=np.full(n_k, np.nan), where=total > 0)
    return {"ocs_s": ocs_s, "eps_s": eps_s, "mix_s": np.maximum(ocs_s, eps_s), "fat_tree_s": ft_s,
            "on_circuits": share}
