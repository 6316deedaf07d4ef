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

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

OCS_PORTS = 500  # an ms-scale OCS (mFabric §4.2)
NICS_PER_SERVER = 8


def port_budget(alpha: int, ocs_ports: int = OCS_PORTS) -> int:
    """Servers one OCS domain covers at optical degree α: floor(ports / α)."""
    return ocs_ports // alpha


def circuits(demand: FloatArray, alpha: int, link_bytes_s: float = 1.0, eps: float = 1e-9) -> IntArray:
    """Circuits per server pair (symmetric, each server ≤ α) for the duplex demand of a region."""
    n = len(demand)
    d = np.triu(demand + demand.T, 1)
    c = np.zeros((n, n), dtype=np.int64)
    free = np.full(n, alpha, dtype=np.int64)
    iu = np.triu_indices(n, 1)
    while True:
        ok = (d[iu] > 0) & (free[iu[0]] > 0) & (free[iu[1]] > 0)
        if not ok.any():
            break
        t = np.where(ok, d[iu] / (c[iu] * link_bytes_s + eps * (1 + d[iu])), -1.0)
        p = int(np.argmax(t))
        i, j = int(iu[0][p]), int(iu[1][p])
        c[i, j] += 1
        free[i] -= 1
        free[j] -= 1
    while True:  # fill: leftover ports to pairs that both have some, by demand
        ok = (free[iu[0]] > 0) & (free[iu[1]] > 0)
        if not ok.any():
            break
        p = int(np.argmax(np.where(ok, d[iu] + 1.0, -1.0)))
        i, j = int(iu[0][p]), int(iu[1][p])
        c[i, j] += 1
        free[i] -= 1
        free[j] -= 1
    for i in np.flatnonzero(free >= 2).tolist():  # repair: a stranded server takes over a circuit (a, b)
        while free[i] >= 2:
            a_b = [(int(a), int(b)) for a, b in zip(*np.nonzero(c), strict=True) if i not in (a, b)]
            if not a_b:
                break
            a, b = max(a_b, key=lambda ab: d[min(i, ab[0]), max(i, ab[0])] + d[min(i, ab[1]), max(i, ab[1])])
            c[a, b] -= 1
            for x in (a, b):
                c[min(i, x), max(i, x)] += 1
            free[i] -= 2
    return c + c.T


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
