"""The What-if page's computation: a run's measured matrices read once, reduced as they stream in,
then every figure (hierarchy, locality and optics, collectives, routing, placement) with its gates.

    for each (step, layer, phase) matrix T:        (one pass; nothing rank×rank kept per step)
        server matrix S = MᵀTM                     → locality, drift, top-K, OCS phase times
        per-(layer, phase) sum of T                → hierarchy geometry, collectives, routing, placement
        sent/received/event byte totals, timings   → the gates

Rank×rank work (projections, placement) runs on the per-(layer, phase) means over the newest
``RANK_WINDOW_STEPS`` steps (the phase page's folded view of its window), so its cost follows
layers × phases, not the run's length; per-step figures (server matrices, drift, the flat-time
prediction) use every step.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from fabricmon.core.phases.gates import Gate, check, coverage_gate
from fabricmon.core.phases.layout import FabricLayout, RankPlacement
from fabricmon.core.phases.projector import Projector, ProjectorCache
from fabricmon.core.phases.routing import Routing
from fabricmon.core.whatif import locality as loc
from fabricmon.core.whatif import ocs
from fabricmon.core.whatif import rank_matrix as rm
from fabricmon.core.whatif.collectives import collectives_figure_values
from fabricmon.core.whatif.matrix_pass import Accumulator
from fabricmon.core.whatif.placement import node_choice, suggest, sum_of
from fabricmon.core.whatif.routing_compare import compare, ecmp_expectation
from fabricmon.core.whatif.server_cells import ServerCells
from fabricmon.core.whatif.terrace import Calibration
from fabricmon.core.whatif.terrace_run import LayerDispatch, row_bytes, terrace_figure
from fabricmon.core.whatif.verdicts import SENSITIVITY, Figure

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Key = tuple[int, int, str]
DISPATCH, COMBINE = "dispatch", "combine"
RANK_WINDOW_STEPS = 16


@dataclass(frozen=True)
class Params:
    """What the user may change on the page (defaults: the papers' own)."""

    top_k: float = 8.0
    alpha: int = 6  # NICs per server on the OCS
    region_servers: int | None = None  # region size k; None: the EP groups / port budget
    reconfig_ms: float = 25.0
    routing: Routing = field(default_factory=lambda: Routing("pxn"))
    calibration: Calibration = field(default_factory=Calibration)
    assumed_ratio: float | None = None
    row_bytes: int | None = None  # H × bytes per element, when declared (else the cells' gcd)


def _durations(acc: Accumulator) -> FloatArray:
    out: FloatArray = np.asarray(acc.end_s) - np.asarray(acc.start_s)
    return out


def _timings_gate(acc: Accumulator) -> Gate:
    d = _durations(acc)
    share = float(np.mean(np.isfinite(d) & (d > 0))) if len(d) else 0.0
    return check("phase_timings", "every phase has measured start and end times (from the events)",
                 share, flag_bound=0.99, withhold_bound=0.9, unit="ratio", higher_is_better=True)


def hierarchy(acc: Accumulator, params: Params, *, link_gbs: float, ratio: float) -> Figure:
    d = _durations(acc)
    layers = []
    for layer, phase in acc.layer_phases():
        if phase != DISPATCH:
            continue
        n = acc.steps_of[(layer, phase)]
        mine = [i for i, k in enumerate(acc.keys) if k[1] == layer and k[2] == phase]
        dur = d[mine]
        median = float(np.median(dur)) if len(dur) and np.isfinite(dur).all() else math.nan
        recv = acc.sums_recv.get((layer, phase))
        layers.append(LayerDispatch(layer, acc.mean((layer, phase)), None if recv is None else recv / n,
                                    acc.event_bytes[(layer, phase)] / n, median,
                                    busiest_cross_bytes=np.asarray(acc.busiest_cross)[mine],
                                    step_durations_s=dur,
                                    row_gcd=(row_bytes(acc.window_cells((layer, phase)))
                                             if params.row_bytes is None else 0)))
    return terrace_figure(layers, acc.server_of_rank, top_k=params.top_k, slow_gbs=link_gbs, ratio=ratio,
                          cal=params.calibration, assumed_ratio=params.assumed_ratio, row=params.row_bytes)


def _symmetry(acc: Accumulator) -> tuple[float, dict[int, float]]:
    per_layer: dict[int, float] = {}
    for (layer, phase) in acc.steps_of:  # S of the window's sums: the sum of its steps' S
        if phase == DISPATCH and (layer, COMBINE) in acc.steps_of:
            sums = acc.server_sums
            per_layer[layer] = loc.symmetry(sums[(layer, DISPATCH)], sums[(layer, COMBINE)])
    worst = max(per_layer.values()) if per_layer else math.nan
    return worst, per_layer


def optics(acc: Accumulator, params: Params, *, link_gbs: float, timings: Gate) -> Figure:
    """mFabric's locality metrics and a regional OCS domain against the run's fabric."""
    n = acc.n_servers
    cells = acc.server_cells  # every key's S as its non-zero cells (no (K, N, N) stack)
    ep = [i for i, k in enumerate(acc.keys) if k[2] in (DISPATCH, COMBINE)]
    w = cells.sum(ep)  # in key order, as a running sum would add them
    k_max = ocs.port_budget(params.alpha)
    k = min(n, params.region_servers or k_max)
    regions = loc.greedy_regions(w, k) if n > 1 else np.zeros(n, dtype=np.int64)
    curve = loc.locality_curve(w)
    rack = np.arange(n) // max(1, k)
    steps = sorted({key[0] for key in acc.keys})
    layers = sorted({key[1] for key in acc.keys if key[2] == DISPATCH})
    by_key = {key: i for i, key in enumerate(acc.keys)}
    grid = _Grid(cells, np.array([[by_key.get((s, layer, DISPATCH), -1) for layer in layers or [0]]
                                       for s in steps], dtype=np.int64).reshape(len(steps), -1), n)
    circuits_k = params.alpha * max(1, min(k, n)) // 2
    link_bytes_s = link_gbs * 1e9
    # phase times with per-phase circuits (reconfigured) and with one static topology from W
    view = ocs.region_view(cells, regions)  # the regions' blocks, gathered once for both
    dyn = ocs.phase_times_all(cells, regions, params.alpha, link_bytes_s, view=view)
    static = ocs.phase_times_all(cells, regions, params.alpha, link_bytes_s, fixed=w, view=view)
    t_mix, t_ft = float(dyn["mix_s"].sum()), float(dyn["fat_tree_s"].sum())
    t_static = float(static["mix_s"].sum())
    on_circ = dyn["on_circuits"].tolist()
    gaps = _gaps(acc)
    penalty = 0.0
    seen_layer: set[tuple[int, int]] = set()
    for i, key in enumerate(acc.keys):
        first = key[2] == DISPATCH and (key[0], key[1]) not in seen_layer
        seen_layer.add((key[0], key[1]))
        if first or (math.isfinite(gaps[i]) and gaps[i] < params.reconfig_ms / 1e3):
            penalty += params.reconfig_ms / 1e3
    sigma, per_layer = _symmetry(acc)
    gates = (
        check("phase_symmetry", "combine retraces dispatch (σ of the normalised server matrices ≈ 0, "
              "mFabric §4.1.7)", sigma, flag_bound=0.02, withhold_bound=loc.SYMMETRY_BOUND),
        timings,
    )
    mix_total = t_mix + penalty
    cost = ocs.cost_panel(t_ft, mix_total, round(link_gbs * 8), params.alpha) if mix_total > 0 else {}
    ep_share = float(np.mean([loc.locality(w, regions)])) if n > 1 else math.nan
    values = {
        "servers": n, "region_servers": k, "port_budget_servers": k_max, "alpha": params.alpha,
        "locality_regions": ep_share,
        "locality_rack_contiguous": loc.locality(w, rack) if n > 1 else math.nan,
        "regions": regions.tolist(), "curve": curve,
        "k_locality": {"k": k, "median": float(np.nanmedian(loc.k_locality(w, k))) if n > 1 else math.nan,
                       "min": float(np.nanmin(loc.k_locality(w, k))) if n > 1 and w.sum() else math.nan},
        "stability": loc.stability(grid, circuits_k) if steps else {},
        "intensity": loc.intensity(acc.mean(next(iter(acc.steps_of)))) if acc.steps_of else {},
        "pair_sparsity": _sparsity(w, circuits_k),
        "times_s": {"fat_tree": t_ft, "mix": t_mix, "reconfig_penalty": penalty,
                    "mix_with_penalty": mix_total,
                    "static_topology": t_static,
                    "mix_over_fat_tree": mix_total / t_ft if t_ft > 0 else math.nan,
                    "static_over_fat_tree": t_static / t_ft if t_ft > 0 else math.nan},
        "bytes_on_circuits": float(np.nanmean(on_circ)) if on_circ else math.nan,
        "cost": cost,
    }
    return Figure(
        "optics", "Locality and a regional optical domain (mFabric / MixNet)",
        assumptions=(
            "servers are the run's hosts; traffic inside a server stays on NVLink",
            f"α = {params.alpha} of 8 NICs per server on the OCS, the rest on a fat-tree; link rate "
            f"{link_gbs * 8:g} Gb/s from the topology",
            f"regions: greedy merging under k = {k} servers (OCS port budget {k_max} at α = {params.alpha})",
            "circuits per (step, layer, phase): Algorithm 1 with ε, skip, fill and repair",
            f"reconfiguration {params.reconfig_ms:g} ms before each layer's first dispatch and any phase "
            "whose preceding gap is shorter",
            "cost: mFabric Table 4 prices; a communication-only estimate (no NVLink delegation hops, "
            "no congestion control)",
        ),
        gates=gates, values=values, always={"symmetry_per_layer": per_layer, "port_budget_servers": k_max},
    )


class _Grid:
    """(steps, layers) of server matrices without a stack: ``grid[i, j]`` is key (i, j)'s S (zeros
    if missing), scattered into one of a few reused buffers (``stability`` reads each matrix a few
    times, neighbours together)."""

    BUFFERS = 3

    def __init__(self, cells: ServerCells, index: IntArray, n: int) -> None:
        self.cells, self.index, self.zero = cells, index, np.zeros((n, n))
        self.shape = (*index.shape, n, n)
        self._held: dict[int, FloatArray] = {}  # key → its buffer, oldest first

    def __getitem__(self, ij: tuple[int, int]) -> FloatArray:
        k = int(self.index[ij])
        if k < 0:
            return self.zero
        hit = self._held.pop(k, None)
        if hit is None:
            if len(self._held) >= self.BUFFERS:
                hit = self.cells.dense(k, self._held.pop(next(iter(self._held))))
            else:
                hit = self.cells.dense(k)
        self._held[k] = hit
        return hit

    def cells_at(self, ij: tuple[int, int]) -> tuple[npt.NDArray[np.intp], FloatArray]:
        """Key (i, j)'s non-zero cells, sorted by flat index (none when missing)."""
        k = int(self.index[ij])
        if k < 0:
            return np.zeros(0, dtype=np.intp), np.zeros(0)
        return self.cells.cells(k)


def _sparsity(w: FloatArray, m: int) -> dict[str, float]:
    v = (w + w.T)[np.triu_indices(len(w), 1)]
    total = float(v.sum())
    if total <= 0:
        return {}
    top = float(np.sort(v)[::-1][:m].sum())
    return {"top_m_share": top / total, "m": m, "effective_pairs": total**2 / float((v**2).sum())}


def _gaps(acc: Accumulator) -> FloatArray:
    """Compute gap before each phase: its start minus the latest end of the phases before it."""
    start, end = np.asarray(acc.start_s), np.asarray(acc.end_s)
    out = np.full(len(start), np.nan)
    order = np.argsort(start, kind="stable")
    latest = -np.inf
    for i in order:
        if math.isfinite(latest) and math.isfinite(start[i]):
            out[i] = start[i] - latest
        if math.isfinite(end[i]):
            latest = max(latest, end[i])
    return out


FULL_ROUTING_WORLD = 1024  # ECMP and spray are projected flow by flow (R² flows) up to this world


_CACHE = ProjectorCache(max_entries=8)  # routing built once per (fabric, placement, routing)


def _projector(layout: FabricLayout, placement: RankPlacement, routing_: Routing) -> Projector:
    return _CACHE.get(layout, placement, routing_)


def _projectors(layout: FabricLayout, placement: RankPlacement, seeds: int = 3) -> dict[str, Projector]:
    """PXN always (flows per source host: 2 M at 4,096 ranks); ECMP (3 seeds) and spraying route
    every rank pair, so beyond FULL_ROUTING_WORLD ranks they are left to the balls-into-bins
    expectation rather than building a 16 M-flow incidence."""
    out = {"pxn": _projector(layout, placement, Routing("pxn"))}
    if placement.world_size <= FULL_ROUTING_WORLD:
        out["spray"] = _projector(layout, placement, Routing("spray"))
        for s in range(seeds):
            out[f"ecmp(seed={s})"] = _projector(layout, placement, Routing("ecmp", s))
    return out


def routing(acc: Accumulator, layout: FabricLayout, placement: RankPlacement, *, measured: FloatArray | None,
            port_names: list[str], coverage: Gate) -> Figure:
    lps = acc.layer_phases()
    means = [acc.mean(lp) for lp in lps]
    loads = {name: _loads(p, means, layout) for name, p in _projectors(layout, placement).items()}
    cols = [(-1, layer, phase) for layer, phase in lps]
    uplink = ~layout.index.host_facing
    out = compare(loads, measured, cols, port_names, uplink)
    # ECMP expectation: the busiest leaf's cross-leaf NIC pairs hashed onto its uplinks
    g = placement.gpu_of_rank
    leaf = layout.nic_leaf[np.maximum(g, 0)]
    n_leaves = len(layout.leaf_names)
    flows = _cross_leaf_flows(acc.mean_total(), leaf, n_leaves) if means else None
    per_leaf: Any = np.bincount(layout.link[:, 0], minlength=n_leaves) if len(layout.link) else []
    if flows is not None and flows.any() and len(per_leaf):
        busiest = int(np.argmax(flows))
        out["ecmp_expectation"] = {"leaf": layout.leaf_names[busiest],
                                   **ecmp_expectation(int(flows[busiest]), int(per_leaf[busiest]))}
    gates = (coverage, check("measured_counters", "switch counters measured these phases (else the "
                             "comparison has no measured column)", 1.0 if measured is not None else math.nan,
                             flag_bound=1.0, withhold_bound=-1.0, higher_is_better=True))
    gates = (gates[0], _flag_only(gates[1]))
    return Figure("routing", "Routing: PXN, ECMP (hash model, 3 seeds) and packet spraying",
                  assumptions=("per (layer, phase): the measured matrices' mean over the run's steps",
                               f"above {FULL_ROUTING_WORLD} ranks only PXN is projected; ECMP's cost is "
                               "then the balls-into-bins expectation",
                               "ECMP: the phases projector's splitmix64 hash model, seeds 0–2 (the spread is "
                               "the collision risk); spraying splits every flow evenly over usable uplinks",
                               "measured: the phase view's attributed per-port bytes, folded the same way"),
                  gates=gates, values=out)


def _loads(proj: Projector, mats: list[rm.RankMatrix], layout: FabricLayout) -> FloatArray:
    """(phases, ports) busier-direction bytes, one phase at a time (no stacked R×R copy)."""
    if not mats:
        return np.zeros((0, len(layout.index)))
    return np.stack([rm.project_load(proj, m) for m in mats])


def _cross_leaf_flows(total: rm.RankMatrix, leaf: IntArray, n_leaves: int) -> IntArray:
    """Per source leaf: how many rank pairs on different leaves carry bytes (row blocks, so the
    R×R comparison is never materialised; a sparse total: its cells)."""
    if rm.is_sparse(total):
        r, c, v = rm.cells(total)
        busy = (v > 0) & (leaf[r] != leaf[c])
        return np.bincount(leaf[r[busy]], minlength=n_leaves).astype(np.int64)
    out = np.zeros(n_leaves, dtype=np.int64)
    step = 256
    for i in range(0, len(total), step):
        busy = (total[i:i + step] > 0) & (leaf[i:i + step, None] != leaf[None, :])
        out += np.bincount(leaf[i:i + step], weights=busy.sum(axis=1), minlength=n_leaves).astype(np.int64)
    return out


def _flag_only(g: Gate) -> Gate:
    """A gate that can only warn (a comparison with no measured column is still a prediction)."""
    if g.verdict != "withhold":
        return g
    return Gate(g.name, g.assumption, g.value, g.unit, g.flag_bound, g.withhold_bound, g.higher_is_better,
                "flag", f"{g.name}: no measured counters for this run — {g.assumption}")


def collectives(acc: Accumulator, layout: FabricLayout, placement: RankPlacement, *, routing_: Routing,
                port_names: list[str], measured_sizes: dict[str, float], coverage: Gate) -> Figure:
    disp = [lp for lp in acc.layer_phases() if lp[1] == DISPATCH]
    a2a = acc.mean(disp[0]) if len(disp) == 1 else None
    if len(disp) > 1:  # mean of the layers (dense: summed in place, one R×R buffer)
        first = acc.mean(disp[0])
        if rm.is_sparse(first) and all(rm.is_sparse(acc.mean(lp)) for lp in disp):
            a2a = sum_of([acc.mean(lp) for lp in disp]) / len(disp)
        else:
            a2a = rm.dense(first).copy()
            for lp in disp[1:]:
                a2a += rm.dense(acc.mean(lp))
            a2a /= len(disp)
    proj = _projector(layout, placement, routing_)
    values = collectives_figure_values(proj, a2a, measured_sizes, port_names)
    return Figure("collectives", "Collective algorithms on this placement",
                  assumptions=(f"routing {routing_.label()} (the run's phase view)",
                               "rings: NCCL rail-aligned channels (one per local GPU index) and, for "
                               "comparison, one ring in rank order",
                               "tree: NCCL double binary tree over hosts on rails 0 and 1",
                               "all-reduce loads per byte of the per-rank buffer S; all-to-all: the measured "
                               "dispatch matrix (mean of layers and steps)"),
                  gates=(coverage,), values=values, note="model of the schedules on the measured placement")


def placement_figure(acc: Accumulator, layout: FabricLayout, placement: RankPlacement, routing_: Routing,
                     coverage: Gate) -> Figure:
    means = [acc.mean(lp) for lp in acc.layer_phases()]
    total = acc.mean_total() if means else None
    values: dict[str, Any] = (suggest(layout, placement, means, routing_, projector=_projector, total=total)
                              if means else {"error": "no matrices"})
    if total is not None:
        values["node_choice"] = node_choice(layout, placement, total)
    return Figure("placement", "Placement suggestion",
                  assumptions=("only the run's own GPUs; ranks swapped between hosts (heaviest receivers "
                               "first), then permuted over local GPU indices (rails)",
                               f"judged by projecting the per-(layer, phase) means under {routing_.label()}",
                               "tensor/pipeline groups are not constrained: check before applying",
                               "node choice: scalable units are hosts sharing the same rail leaves; a "
                               "suggested SU's other hosts are assumed free"),
                  gates=(coverage,), values=values)


def whatif(acc: Accumulator, layout: FabricLayout, placement: RankPlacement, params: Params, *,
           link_gbs: float, ratio: float, measured: FloatArray | None, port_names: list[str],
           measured_sizes: dict[str, float] | None = None) -> dict[str, Any]:
    """Every figure of the page, as plain data (with the seconds each took, for the bench)."""
    coverage = coverage_gate(placement.coverage)
    timings = _timings_gate(acc)
    spent: dict[str, float] = {}

    def timed(name: str, make: Callable[[], Figure]) -> Figure:
        t, c = time.perf_counter(), time.process_time()
        fig = make()
        spent[name] = time.perf_counter() - t
        spent[f"{name}_cpu"] = time.process_time() - c  # CPU seconds: what a loaded machine moves less
        return fig

    h = timed("hierarchy", lambda: hierarchy(acc, params, link_gbs=link_gbs, ratio=ratio))
    figs = [Figure(h.name, h.title, h.assumptions, (*h.gates, timings), h.values, h.always),
            timed("optics", lambda: optics(acc, params, link_gbs=link_gbs, timings=timings))]
    if placement.coverage >= 0.9:
        figs.append(timed("collectives", lambda: collectives(
            acc, layout, placement, routing_=params.routing, port_names=port_names,
            measured_sizes=measured_sizes or {}, coverage=coverage)))
        figs.append(timed("routing", lambda: routing(acc, layout, placement, measured=measured,
                                                     port_names=port_names, coverage=coverage)))
        figs.append(timed("placement", lambda: placement_figure(acc, layout, placement, params.routing,
                                                                coverage)))
    else:
        for name in ("collectives", "routing", "placement"):
            figs.append(Figure(name, name, ("ranks placed on the fabric by the rank map",), (coverage,), {}))
    return {"note": SENSITIVITY, "keys": len(acc.keys), "figures": [f.as_dict() for f in figs],
            "seconds": spent}


def accumulate(server_of_rank: IntArray, n_servers: int,
               rows: Iterable[tuple[Key, FloatArray, FloatArray | None, float, float, float]]) -> Accumulator:
    acc = Accumulator(server_of_rank, n_servers)
    for key, sent, received, ev_bytes, start_s, end_s in rows:
        acc.add(key, sent, received, event_bytes=ev_bytes, start_s=start_s, end_s=end_s)
    return acc
