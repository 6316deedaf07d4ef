"""The TerraceMoE model on a run's own measurements: its geometry from the dispatch matrices, its
slow link from the topology, its fast/slow ratio from timed collectives, and three gates.

    groups      the scale-up domains (servers) the run's ranks sit on; R ranks each
    row bytes   the gcd of the measured per-peer bytes (every cell is a whole number of rows)
    T·k rows    a rank's dispatch bytes / row bytes;  k (top-k) is declared, T = rows / k
    M           expected distinct groups hit per token: Σ_g 1 − (1 − P_g)^k, P_g the share of a
                source's rows that go to group g (tokens' choices taken as independent — declared)

Gates: ``byte_accounting`` (matrices agree with the events' byte counts and sent with received),
``ratio_measured`` (the fast/slow ratio comes from timed collectives, not an assumption) and
``flat_prediction`` (the model's flat time, from the busiest receiver's cross-group bytes at the
slow link's rate, agrees with the measured phase durations within ``PREDICTION_BOUND``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from fabricmon.core.phases.gates import check
from fabricmon.core.whatif import rank_matrix as rm
from fabricmon.core.whatif.terrace import (
    Calibration,
    Geometry,
    breakeven,
    byte_only_breakeven,
    flat_time,
    speedup,
    verdict,
    with_fast,
)
from fabricmon.core.whatif.verdicts import Figure

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

PREDICTION_BOUND = 1.5  # model flat time within ×1.5 of the measured phase (flag beyond ×1.25)
SENSITIVITY_RATIOS = (1.03, 3.2, 8.0, 15.7)  # the paper's platform points (docs/05 table)
CHAINS = ("measured", "fused", "zero")


@dataclass(frozen=True)
class LayerDispatch:
    """One MoE layer's dispatch, as measured: the per-step mean rank×rank bytes, and the median
    phase duration (NaN when the run has no timings for it)."""

    layer: int
    sent: rm.RankMatrix  # (R, R) bytes per step (dense, or sparse cells: ``rank_matrix``)
    received: FloatArray | None  # None: the receivers reported nothing apart (taken as equal)
    event_bytes: float  # the events' own bytes_sent per step, summed over ranks
    duration_s: float  # median over steps (NaN: some step has no timing)
    # per step: the busiest rank's cross-group bytes (in or out) and the phase's measured duration
    busiest_cross_bytes: FloatArray | None = None
    step_durations_s: FloatArray | None = None
    row_gcd: int = 0  # gcd of the summed (exact, integer) cells; 0 when unknown


def row_bytes(matrix: FloatArray) -> int:
    """The largest row size every measured cell is a multiple of (0 for an empty matrix)."""
    m = np.asarray(matrix.data if rm.is_sparse(matrix) else matrix)
    cells = m[m > 0].astype(np.int64)
    cells = cells[cells > 0]
    if not len(cells):
        return 0
    # the gcd of a sample, refined by the cells it does not divide until it divides them all: the
    # gcd of every cell, at one vectorised modulo per refinement instead of a gcd per cell
    g = int(np.gcd.reduce(cells[:4096]))
    while g > 1:
        rest = cells[cells % g != 0]
        if not len(rest):
            break
        g = math.gcd(g, int(np.gcd.reduce(rest[:4096])))
    return g


def by_group_columns(m: FloatArray, group_of_rank: IntArray) -> FloatArray:
    """(R, R) → (R, groups): each row's bytes summed over the columns of every group, in one read:
    equal contiguous groups (hosts in fabric order) as a BLAS fold, few groups (rails) as a
    product with their membership, else a reduceat over group-sorted columns."""
    n_groups = int(group_of_rank.max()) + 1
    r = len(group_of_rank)
    if rm.is_sparse(m):  # over the stored cells: (row, column's group) bins
        rows, cols, v = rm.cells(m)
        by_cols: FloatArray = np.bincount(rows * n_groups + group_of_rank[cols], weights=v,
                                          minlength=m.shape[0] * n_groups).astype(np.float64, copy=False)
        return by_cols.reshape(m.shape[0], n_groups)
    g = r // n_groups
    if g * n_groups == r and np.array_equal(group_of_rank, np.repeat(np.arange(n_groups), g)):
        folded = np.ascontiguousarray(m).reshape(m.shape[0] * n_groups, g) @ np.ones(g, dtype=m.dtype)
        return np.asarray(folded, dtype=np.float64).reshape(m.shape[0], n_groups)
    if n_groups <= 64:
        member = np.zeros((r, n_groups), dtype=m.dtype)
        member[np.arange(r), group_of_rank] = 1.0
        return np.asarray(m @ member, dtype=np.float64)
    order = np.argsort(group_of_rank, kind="stable")
    counts = np.bincount(group_of_rank, minlength=n_groups)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    out = np.zeros((m.shape[0], n_groups))
    present = counts > 0
    out[:, present] = np.add.reduceat(m[:, order], starts[present], axis=1, dtype=np.float64)
    return out


def by_group_rows(m: FloatArray, group: IntArray, n_groups: int) -> FloatArray:
    """(R, R) → (groups, R): column d's bytes summed over the source rows of every group, in one
    read: equal contiguous groups (hosts in rank order) as a BLAS fold, groups that repeat with a
    period (local indices in host-major order) as a sum over the periods, else one reduceat over
    group-sorted rows."""
    r = len(group)
    if rm.is_sparse(m) and r:  # over the stored cells: (row's group, column) bins
        r_, c_, v = rm.cells(m)
        sparse_rows: FloatArray = np.bincount(group[r_] * m.shape[1] + c_, weights=v,
                                              minlength=n_groups * m.shape[1]).astype(np.float64, copy=False)
        return sparse_rows.reshape(n_groups, -1)
    out = np.zeros((n_groups, m.shape[1]))
    if not r:
        return out
    g = r // n_groups
    if g * n_groups == r and np.array_equal(group, np.repeat(np.arange(n_groups), g)):
        folded: FloatArray = np.ones(g) @ np.asarray(m, dtype=np.float64).reshape(n_groups, g, -1)
        return folded
    if g * n_groups == r and np.array_equal(group, np.tile(np.arange(n_groups), g)):
        periodic: FloatArray = np.asarray(m, dtype=np.float64).reshape(g, n_groups, -1).sum(axis=0)
        return periodic
    order = np.argsort(group, kind="stable")
    counts = np.bincount(group, minlength=n_groups)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rows = m if np.array_equal(order, np.arange(len(order))) else m[order]
    present = counts > 0
    out[present] = np.add.reduceat(rows, starts[present], axis=0, dtype=np.float64)
    return out


def _shares(sent: FloatArray, group_of_rank: IntArray) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
    to_group = by_group_columns(sent, group_of_rank)
    total = to_group.sum(axis=1, keepdims=True)
    share = np.divide(to_group, total, out=np.zeros_like(to_group), where=total > 0)
    return share, total[:, 0] > 0


def groups_per_token(sent: FloatArray, group_of_rank: IntArray, top_k: float) -> float:
    """Expected distinct groups a token's k choices hit, averaged over sources."""
    share, active = _shares(sent, group_of_rank)
    hit = (1 - (1 - share) ** top_k).sum(axis=1)
    return float(hit[active].mean()) if active.any() else math.nan


def geometry(d: LayerDispatch, group_of_rank: IntArray, top_k: float, row: int | None = None) -> Geometry:
    """The layer's geometry. N_g is the number of groups a source's dispatch reaches (median over
    sources: an EP group smaller than the job spans only its own servers); ``row`` declared
    (H × bytes per element), else the gcd of the summed cells, else of the mean's."""
    share, active = _shares(d.sent, group_of_rank)
    reached = (share > 0).sum(axis=1)[active]
    n_groups = int(np.median(reached)) if len(reached) else int(group_of_rank.max()) + 1
    r = int(np.bincount(group_of_rank).max())
    row = row or d.row_gcd or row_bytes(d.sent)
    rows = float(rm.row_sums(d.sent).mean()) / row if row else math.nan
    hit = (1 - (1 - share) ** top_k).sum(axis=1)
    m = float(hit[active].mean()) if active.any() else math.nan
    return Geometry(groups=max(1, n_groups), ranks_per_group=r, top_k=top_k, groups_per_token=m,
                    row_bytes=row, tokens_per_rank=rows / top_k)


def busiest_cross(sent: FloatArray, group_of_rank: IntArray) -> float:
    """The busiest rank's bytes to or from other groups (what a flat all-to-all waits for)."""
    r = np.arange(len(group_of_rank))
    out = sent.sum(axis=1) - by_group_columns(sent, group_of_rank)[r, group_of_rank]
    into = sent.sum(axis=0) - by_group_columns(sent.T, group_of_rank)[r, group_of_rank]
    return max(float(out.max()), float(into.max()))


def prediction_error(d: LayerDispatch, group_of_rank: IntArray, g: Geometry, cal: Calibration,
                     slow_gbs: float) -> tuple[float, float]:
    """(model flat time s, its worse-direction ratio to the measured duration): per step where the
    steps' busiest bytes are known (median of the ratios), else from the layer's mean matrix."""
    # the per-peer message: a rank's bytes over the peers it actually sends to
    peers = max(1, rm.nonzeros(d.sent))
    sat = cal.saturation(rm.total(d.sent) / peers)
    if not sat:
        return math.nan, math.nan
    beta = slow_gbs * 1e9 * sat
    if d.busiest_cross_bytes is not None and d.step_durations_s is not None:
        pred = cal.alpha(g.ep) / 1e3 + d.busiest_cross_bytes / beta
        meas = d.step_durations_s
    else:
        pred = np.array([cal.alpha(g.ep) / 1e3 + busiest_cross(rm.dense(d.sent), group_of_rank) / beta])
        meas = np.array([d.duration_s])
    if not len(meas) or not np.isfinite(meas).all() or (meas <= 0).any():
        return float(np.median(pred)), math.inf
    return float(np.median(pred)), float(np.median(np.maximum(pred / meas, meas / pred)))


def measured_ratio(fast_rates_bps: FloatArray, slow_rates_bps: FloatArray, min_samples: int = 3) -> float:
    """Median achieved rate of collectives inside one group over that of collectives between groups
    (NaN unless both kinds were timed at least ``min_samples`` times)."""
    if len(fast_rates_bps) < min_samples or len(slow_rates_bps) < min_samples:
        return math.nan
    return float(np.median(fast_rates_bps) / np.median(slow_rates_bps))


def _accounting_error(layers: list[LayerDispatch]) -> float:
    sent = sum(rm.total(d.sent) for d in layers)
    if not layers or sent <= 0:
        return math.nan
    events = sum(d.event_bytes for d in layers)
    mismatch = sum(float(np.abs(rm.dense(d.sent) - d.received).sum())
                   for d in layers if d.received is not None)
    return max(abs(sent - events) / sent, mismatch / sent)


def terrace_figure(
    layers: list[LayerDispatch],
    group_of_rank: IntArray,
    *,
    top_k: float,
    slow_gbs: float,
    ratio: float,
    cal: Calibration | None = None,
    assumed_ratio: float | None = None,
    row: int | None = None,
) -> Figure:
    """Per layer: geometry, breakevens for the three chains, measured-ratio verdicts; gated."""
    cal = cal or Calibration()
    rows: list[dict[str, Any]] = []
    errors: list[float] = []
    rows_found = []
    geometries = []
    for d in layers:
        g = geometry(d, group_of_rank, top_k, row)
        geometries.append(g)
        rows_found.append(g.row_bytes)
        # the run's own fast fabric: β_fast∞ = ρ·β_slow∞ when ρ is known (else the paper's machine)
        c = with_fast(cal, ratio * slow_gbs) if math.isfinite(ratio) else cal
        pred, err = prediction_error(d, group_of_rank, g, cal, slow_gbs)
        errors.append(err)
        be = {ch: breakeven(g, c, ch) for ch in CHAINS}
        rows.append({
            "layer": d.layer, "groups": g.groups, "ranks_per_group": g.ranks_per_group,
            "top_k": g.top_k, "groups_per_token": g.groups_per_token, "q": g.q,
            "row_bytes": g.row_bytes, "tokens_per_rank": g.tokens_per_rank,
            "byte_only_breakeven": byte_only_breakeven(g),
            "breakeven": be,
            "verdict": {ch: verdict(ratio, be[ch]) for ch in CHAINS},
            "speedup_at_ratio": {ch: speedup(g, c, ch, ratio) if math.isfinite(ratio) else math.nan
                                 for ch in CHAINS},
            "predicted_flat_ms": pred * 1e3, "measured_ms": d.duration_s * 1e3,
            "model_flat_ms_at_ratio": flat_time(g, c).at(ratio) if math.isfinite(ratio) else math.nan,
        })
    worst = max(errors) if errors else math.nan
    if any(math.isnan(e) for e in errors):
        worst = math.nan
    gates = (
        check("row_size", "the row size (H × bytes per element) is declared or every measured cell is a "
              "whole number of rows of at least 64 bytes", float(min(rows_found, default=0)),
              flag_bound=64, withhold_bound=64, unit="B", higher_is_better=True),
        check("byte_accounting",
              "the matrices' bytes equal the events' byte counts, and sent equals received",
              _accounting_error(layers), flag_bound=0.01, withhold_bound=0.05, unit="ratio"),
        check("ratio_measured", "the fast/slow bandwidth ratio is measured from timed collectives "
              "inside and between scale-up domains, not assumed", ratio, flag_bound=0.0, withhold_bound=0.0,
              higher_is_better=True),
        check("flat_prediction", f"the model's flat all-to-all time agrees with the measured dispatch "
              f"durations within ×{PREDICTION_BOUND}", worst,
              flag_bound=1.25, withhold_bound=PREDICTION_BOUND),
    )
    sens_ratios = sorted({*SENSITIVITY_RATIOS, *([assumed_ratio] if assumed_ratio else [])})
    sensitivity = []
    for g in geometries[:1]:
        sensitivity = [{"ratio": r, **{ch: speedup(g, cal, ch, r) for ch in CHAINS}} for r in sens_ratios]
    return Figure(
        "hierarchy", "Hierarchical dispatch (TerraceMoE call-level model)",
        assumptions=(
            "groups are the scale-up domains (servers) the ranks sit on; Hop A crosses the slow fabric, "
            "Hop B stays inside a group",
            f"top-k = {top_k:g} (declared); tokens pick groups independently, so M = Σ_g 1−(1−P_g)^k",
            (f"row size {row} B declared" if row else "row size = gcd of the measured per-peer bytes")
            + "; T = rows / k",
            f"slow fabric β∞ = {slow_gbs:g} GB/s (NIC link rate from the topology); β saturates "
            f"with x_half = {cal.x_half_bytes / 1024:g} KiB",
            "α(world), sync and arrival-chain costs: TerraceMoE's published calibration unless edited",
            "the dispatch phase only (combine mirrors it with its own row size)",
        ),
        gates=gates,
        values={"layers": rows, "ratio": ratio},
        always={"calibration": {"alpha_ms": cal.alpha_ms, "x_half_bytes": cal.x_half_bytes,
                                "sync_ms": cal.sync_ms, "chains_us_per_row": cal.chains_us_per_row},
                "sensitivity": sensitivity, "assumed_ratio": assumed_ratio,
                "breakeven_per_layer": [{"layer": r["layer"], **r["breakeven"]} for r in rows]},
    )
