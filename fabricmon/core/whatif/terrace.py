"""Hierarchical (two-hop) MoE dispatch against the flat all-to-all: the TerraceMoE call-level model.

Sources: arXiv 2608.27874 and ``weich97/TerraceMoE-simulator`` (sim/core.py, sim/calibrate.py), as
summarised in ../shared/reference/fabric_model.md §4. One call, per rank::

    flat   α(EP)  + (1−1/EP)·T·k·row / β_slow(x_flat)                  every row over the slow fabric
    hier   α(N_g) + (1−1/N_g)·T·M·row / β_slow(x_A)                    Hop A: one row per (token, group)
         + α(R)   + (1−1/R)·T·k·row  / β_fast(x_B)                     Hop B: scatter inside the group
         + s_sync + c_chain·T·k                                        host sync + arrival chain

    β(x) = β∞·x/(x + x_half), x the per-peer message; the synthetic machines of the paper keep
    β_fast∞ fixed and set β_slow∞ = β_fast∞/ρ, so both times are linear in ρ = β_fast/β_slow and the
    breakeven ρ* (t_flat = t_hier) is closed form.

With the published constants at 16 groups × 8 ranks, q = k/M = 3 (k = 6, M = 2), H = 2048 BF16,
4,096 tokens/rank: ρ* = 3.98 (PyTorch arrival chain), 1.49 (fused), 1.10 (zero chain cost) — a
platform at 1.03 is below all three, so hierarchy loses there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

KIB = 1024.0
GB = 1e9

# α(world) in ms measured by TerraceMoE (sim/calibrate.py)
PUBLISHED_ALPHA_MS: tuple[tuple[int, float], ...] = (
    (2, 0.09), (8, 0.111), (16, 0.157), (128, 0.378), (256, 0.735), (512, 1.859),
)
# arrival-chain cost per routed row, µs: measured PyTorch chain (2.15 ms / 24,576 rows), fused, none
CHAINS_US_PER_ROW: dict[str, float] = {"measured": 2.15e3 / 24_576, "fused": 0.012, "zero": 0.0}


@dataclass(frozen=True)
class Calibration:
    """The model's constants; defaults are the published ones (editable on the page and API)."""

    alpha_ms: tuple[tuple[int, float], ...] = PUBLISHED_ALPHA_MS
    x_half_bytes: float = 54 * KIB  # saturation half-point of β (90 % CI 30–87 KiB)
    beta_fast_gbs: float = 100.0  # the synthetic machines' fast fabric, GB/s
    sync_ms: float = 0.044  # host sync of the split sizes
    chains_us_per_row: dict[str, float] = field(default_factory=lambda: dict(CHAINS_US_PER_ROW))

    def alpha(self, world: int) -> float:
        """α(world) in ms: piecewise linear in log2(world) between the measured worlds, extended
        linearly past the ends (a world of 1 costs nothing)."""
        if world <= 1:
            return 0.0
        xs = np.log2([w for w, _ in self.alpha_ms])
        ys = np.array([a for _, a in self.alpha_ms])
        x = math.log2(world)
        if x <= xs[0] or x >= xs[-1]:
            i = 0 if x <= xs[0] else len(xs) - 2
            slope = (ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i])
            return float(max(0.0, ys[i] + slope * (x - xs[i])))
        return float(np.interp(x, xs, ys))

    def saturation(self, per_peer_bytes: float) -> float:
        """β(x)/β∞ for a per-peer message of ``per_peer_bytes``."""
        return per_peer_bytes / (per_peer_bytes + self.x_half_bytes) if per_peer_bytes > 0 else 0.0


@dataclass(frozen=True)
class Geometry:
    """One MoE layer's dispatch geometry: N_g groups (scale-up domains) of R ranks, top-k, M groups
    hit per token on average, ``row_bytes`` per routed row (H × bytes per element), T tokens/rank."""

    groups: int
    ranks_per_group: int
    top_k: float
    groups_per_token: float
    row_bytes: float
    tokens_per_rank: float

    @property
    def ep(self) -> int:
        return self.groups * self.ranks_per_group

    @property
    def q(self) -> float:
        return self.top_k / self.groups_per_token if self.groups_per_token > 0 else math.inf


REFERENCE = Geometry(groups=16, ranks_per_group=8, top_k=6, groups_per_token=2, row_bytes=2048 * 2,
                     tokens_per_rank=4096)


@dataclass(frozen=True)
class Linear:
    """t(ρ) = a + b·ρ in ms."""

    a: float
    b: float

    def at(self, rho: float) -> float:
        return self.a + self.b * rho


def flat_time(g: Geometry, cal: Calibration) -> Linear:
    """The flat all-to-all's time as a function of ρ (β_slow∞ = β_fast∞/ρ)."""
    rows = g.tokens_per_rank * g.top_k
    wire = (1 - 1 / g.ep) * rows * g.row_bytes
    sat = cal.saturation(rows * g.row_bytes / g.ep)
    return Linear(cal.alpha(g.ep), 1e3 * wire / (cal.beta_fast_gbs * GB * sat) if sat else math.inf)


def hier_time(g: Geometry, cal: Calibration, chain: str) -> Linear:
    """Hop A (slow, deduplicated per group) + Hop B (fast) + overheads, as a function of ρ."""
    rows = g.tokens_per_rank * g.top_k
    hop_a = (1 - 1 / g.groups) * g.tokens_per_rank * g.groups_per_token * g.row_bytes
    sat_a = cal.saturation(g.tokens_per_rank * g.groups_per_token * g.row_bytes / g.groups)
    hop_b = (1 - 1 / g.ranks_per_group) * rows * g.row_bytes
    sat_b = cal.saturation(rows * g.row_bytes / g.ranks_per_group)
    fast_ms = 1e3 * hop_b / (cal.beta_fast_gbs * GB * sat_b) if sat_b else 0.0
    overhead_ms = cal.sync_ms + cal.chains_us_per_row[chain] * 1e-3 * rows
    a = cal.alpha(g.groups) + cal.alpha(g.ranks_per_group) + fast_ms + overhead_ms
    b = 1e3 * hop_a / (cal.beta_fast_gbs * GB * sat_a) if sat_a else 0.0
    return Linear(a, b)


def breakeven(g: Geometry, cal: Calibration, chain: str) -> float:
    """ρ* where t_flat = t_hier; inf when hierarchy never wins (it saves no slow time)."""
    f, h = flat_time(g, cal), hier_time(g, cal, chain)
    if f.b <= h.b:
        return math.inf
    return max(0.0, (h.a - f.a) / (f.b - h.b))


def speedup(g: Geometry, cal: Calibration, chain: str, rho: float) -> float:
    """G = t_flat / t_hier at fast/slow ratio ``rho`` (> 1: hierarchy wins)."""
    return flat_time(g, cal).at(rho) / hier_time(g, cal, chain).at(rho)


def byte_only_breakeven(g: Geometry) -> float:
    """The byte-only limit (1−1/R)·q/(q−1) (docs/03 of the simulator)."""
    q = g.q
    return (1 - 1 / g.ranks_per_group) * q / (q - 1) if q > 1 else math.inf


def verdict(rho: float, rho_star: float) -> str:
    """What a measured ratio says against a breakeven."""
    if not math.isfinite(rho):
        return "unknown"
    return "hierarchy wins" if rho > rho_star else "hierarchy loses"


def with_fast(cal: Calibration, beta_fast_gbs: float) -> Calibration:
    return replace(cal, beta_fast_gbs=beta_fast_gbs)
