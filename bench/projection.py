"""Projection and attribution cost at scale.

* projection: per-phase bytes onto ports for a 4,096-GPU rail-optimized fabric (512 servers × 8
  GPUs, 16 SUs, 128 rail-leaves, 32 spines; PXN, so cross-SU traffic climbs to the spines with
  ECMP). Routing is built once (cached per rank map); each phase is one fold of the 4096×4096
  matrix (the one unavoidable read of the input: 134 MB as float64, 67 MB as float32), a few
  BLAS sums and one ~4 M non-zero sparse matvec for the cross-leaf cable pairs. Figures are the
  minimum over phases (and the median): the machine is shared. Reference: the twin's own
  router (``twin.routing.Router``), the per-phase bincount engine the simulator uses, on the same matrices.
* attribution: 1 hour of 1 s samples (3,600 intervals, every port in and out) split over the
  phases of an MoE job (8 layers × dispatch/combine, ~350 ms steps): counters alone (shared-Gram
  NNLS, then hot ports with their confidence) and with the projection as prior (batched K×K solves).
* attribution update: what a live run's update costs instead — the hour's closed intervals kept
  as normal-equation sums (``AttributionSums``), one new 1 s interval added, the K×K system solved;
  and ``LiveAttribution.sums`` (checks of the kept part, the open 10 s tail recomputed).

Prints ``BENCH projection ms_per_phase=… gpus=4096 attribution_s_per_hour=… attribution_update_s=…``.
Single core.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from fabricmon.core.phases.attribution_fit import AttributionSums, attribute
from fabricmon.core.phases.layout import FabricLayout, RankPlacement
from fabricmon.core.phases.live_attribution import LiveAttribution
from fabricmon.core.phases.projector import ProjectorCache
from fabricmon.core.phases.routing import Routing
from fabricmon.core.phases.timeline import PhaseTimeline, design_rows
from fabricmon.core.topology.port_index import build_port_index
from fabricmon.core.topology.railgen import rail_optimized


def _per_phase_ms(fn, mats: list, phases: int) -> tuple[float, float]:  # type: ignore[type-arg]
    """(min, median) ms per call: the machine is shared, the minimum is the code's own cost."""
    fn(mats[0])  # warm
    times = []
    for k in range(phases):
        t = time.perf_counter()
        fn(mats[k % len(mats)])
        times.append((time.perf_counter() - t) * 1e3)
    return min(times), float(np.median(times))


def bench_projection(phases: int = 9) -> dict[str, float]:
    fab = rail_optimized("bench4k", servers=512, gpus_per_server=8, spines=32)
    idx = build_port_index(fab)
    layout = FabricLayout.from_spec(fab, idx)
    n = layout.n_gpus
    t = time.perf_counter()
    proj = ProjectorCache().get(layout, RankPlacement(np.arange(n)), Routing("pxn"))
    out: dict[str, float] = {"build_s": time.perf_counter() - t, "ports": float(len(idx))}
    rng = np.random.default_rng(0)
    mats = [rng.random((n, n)) * 1e6 for _ in range(2)]
    mats32 = [m.astype(np.float32) for m in mats]  # bytes as float32: 24-bit mantissa, ~6e-8 relative
    out["ms64"], out["ms64_med"] = _per_phase_ms(proj.project, mats, phases)
    out["ms32"], out["ms32_med"] = _per_phase_ms(proj.project, mats32, phases)
    a, b = proj.project(mats[0]), proj.project(mats32[0])
    out["f32_rel_err"] = float(np.abs(a.out_bytes - b.out_bytes).max() / a.out_bytes.max())
    out["floor64"], _ = _per_phase_ms(np.sum, mats, phases)  # one read of the input: the floor
    out["floor32"], _ = _per_phase_ms(np.sum, mats32, phases)
    out["ref_ms"] = float("nan")
    try:
        from twin.routing import Router, Wiring

        router = Router(Wiring(fab, idx), "pxn")
        out["ref_ms"], _ = _per_phase_ms(router.route, mats, 3)
        want = router.route(mats[0])
        out["ref_rel_err"] = float(np.abs(a.out_bytes - want.out_bytes).max() / want.out_bytes.max())
    except ImportError:
        pass
    return out


def bench_attribution(ports: int = 12288, hours: float = 1.0) -> dict[str, float]:
    rng = np.random.default_rng(1)
    step_ns, t0 = 350_000_000, 1_800_000_000_000_000_000
    n_steps = int(hours * 3600e9 / step_ns) + 2
    rows = []
    for s in range(n_steps):
        t = t0 + s * step_ns
        for layer in range(8):
            for j, ph in enumerate(("dispatch", "combine")):
                a = t + (layer * 2 + j) * 18_000_000
                rows.append((s, layer, ph, a, a + 12_000_000))
    tl = PhaseTimeline.from_events(rows)
    edges = t0 + np.arange(int(hours * 3600) + 1, dtype=np.int64) * 1_000_000_000
    x = rng.random((len(tl.keys), 2 * ports)) * 1e8
    from fabricmon.core.phases.timeline import occupancy

    m = occupancy(tl, edges) @ x * (1 + 0.05 * rng.standard_normal((len(edges) - 1, 2 * ports)))
    t = time.perf_counter()
    att = attribute(tl, edges, m)
    alone_s = time.perf_counter() - t
    att.hot_ports(ports)
    alone_hot_s = time.perf_counter() - t
    # with the projection as prior (the phases app's view when the projection passes its gates)
    prior = x * (1 + 0.01 * rng.standard_normal(x.shape))
    t = time.perf_counter()
    att_p = attribute(tl, edges, m, prior=prior, prior_rel_error=0.01)
    att_p.hot_ports(ports)
    prior_s = time.perf_counter() - t
    # a live run's update: the hour's closed intervals already summed, one new 1 s poll arrives
    out = {"alone_s": alone_s, "alone_hot_s": alone_hot_s, "prior_s": prior_s, "residual": att.residual_rel}
    out.update(bench_update(tl, edges, m, prior, ports))
    return out


def bench_update(tl: PhaseTimeline, edges: np.ndarray, m: np.ndarray, prior: np.ndarray, ports: int, *,
                 repeats: int = 3) -> dict[str, float]:
    """Per-update cost of the live path: sums of the hour but its last interval kept
    (``AttributionSums``), then copy + add the new interval + solve (+ hot ports); and the whole
    ``LiveAttribution.sums`` step (checks of what is kept, the 10 s open tail recomputed). Minimum
    over ``repeats``: the machine is shared."""
    kept = AttributionSums(tl.keys, m.shape[1])
    occ, dt_s = design_rows(tl, edges[:-1])
    kept.add(occ, m[:-1], dt_s)
    new_occ, new_dt = design_rows(tl, edges[-2:])
    times: dict[str, list[float]] = {"add_s": [], "alone_s": [], "prior_s": [], "live_sums_s": []}
    for _ in range(repeats):
        t = time.perf_counter()
        sums = kept.copy()
        sums.add(new_occ, m[-1:], new_dt)
        times["add_s"].append(time.perf_counter() - t)
        t = time.perf_counter()
        sums.solve().hot_ports(ports)
        times["alone_s"].append(time.perf_counter() - t)
        t = time.perf_counter()
        sums.solve(prior=prior, prior_rel_error=0.01).hot_ports(ports)
        times["prior_s"].append(time.perf_counter() - t)
    live = LiveAttribution()
    live.sums(tl, edges[:-1], m[:-1])  # the hour so far (folded once)
    for _ in range(repeats):
        t = time.perf_counter()
        live.sums(tl, edges, m)
        times["live_sums_s"].append(time.perf_counter() - t)
    want = attribute(tl, edges, m, prior=prior, prior_rel_error=0.01).bytes_per_phase
    got = live.sums(tl, edges, m).solve(prior=prior, prior_rel_error=0.01).bytes_per_phase
    res = {f"update_{k}": min(v) for k, v in times.items()}
    res["update_max_rel_diff"] = float(np.abs(got - want).max() / np.abs(want).max())
    res["live_rebuilds"] = float(live.stats["rebuilds"])
    return res


def main() -> None:
    r = bench_projection()
    print(f"projection: 4096 GPUs, {r['ports']:.0f} ports, PXN; routing built once in {r['build_s']:.1f} s")
    print(
        f"  float64 matrices: {r['ms64']:.1f} ms/phase (median {r['ms64_med']:.1f});"
        f" reading the input alone: {r['floor64']:.1f} ms"
    )
    print(
        f"  float32 matrices: {r['ms32']:.1f} ms/phase (median {r['ms32_med']:.1f});"
        f" reading the input alone: {r['floor32']:.1f} ms;"
        f" max error vs float64 {r['f32_rel_err']:.1e}"
    )
    print(
        f"  twin router (reference, same matrices): {r['ref_ms']:.1f} ms/phase, max error"
        f" vs it {r.get('ref_rel_err', float('nan')):.1e}"
    )
    a = bench_attribution()
    print(
        f"attribution: 3600 x 1 s samples x {2 * 12288} counters, 16 (layer, phase):"
        f" counters alone {a['alone_s']:.1f} s"
        f" ({a['alone_hot_s']:.1f} s with hot ports + confidence; residual {a['residual']:.3f}),"
        f" counters + projection prior {a['prior_s']:.1f} s"
    )
    print(
        f"attribution update, 1 new 1 s interval onto an hour of kept sums ({2 * 12288} counters): add"
        f" {a['update_add_s'] * 1e3:.0f} ms, solve counters alone {a['update_alone_s']:.2f} s, with prior"
        f" {a['update_prior_s']:.2f} s; LiveAttribution.sums step (checks + 10 s tail)"
        f" {a['update_live_sums_s'] * 1e3:.0f} ms; vs the whole-hour refit above;"
        f" live vs fresh max rel diff {a['update_max_rel_diff']:.1e}"
    )
    print(
        f"BENCH projection ms_per_phase={r['ms64']:.1f} ms_per_phase_f32={r['ms32']:.1f} gpus=4096 "
        f"attribution_s_per_hour={a['alone_hot_s']:.2f} attribution_prior_s_per_hour={a['prior_s']:.2f} "
        f"twin_router_ms_per_phase={r['ref_ms']:.1f} "
        f"attribution_update_s={a['update_add_s'] + a['update_live_sums_s'] + a['update_alone_s']:.3f} "
        f"attribution_update_prior_s={a['update_add_s'] + a['update_live_sums_s'] + a['update_prior_s']:.3f}"
    )


if __name__ == "__main__":
    main()
