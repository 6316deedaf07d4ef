"""Projection and attribution cost at scale.

* projection: per-phase bytes onto ports for a 4,096-GPU rail-optimized fabric (512 servers × 8
  GPUs, 16 SUs, 128 rail-leaves, 32 spines; PXN, so cross-SU traffic climbs to the spines with
  ECMP). Routing is built once (cached per rank map); each phase is one fold of the 4096×4096
  matrix plus one sparse matvec. Reference: the twin's own router (``twin.routing.Router``), the
  per-phase bincount engine the simulator uses, on the same matrices.
* attribution: 1 hour of 1 s samples (3,600 intervals, every port in and out) split over the
  phases of an MoE job (8 layers × dispatch/combine, ~350 ms steps).

Prints ``BENCH projection ms_per_phase=… gpus=4096 attribution_s_per_hour=…``. Single core.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from fabricmon.core.attribution import PhaseTimeline, attribute  # noqa: E402
from fabricmon.core.projection import FabricLayout, ProjectorCache, RankPlacement, Routing  # noqa: E402
from fabricmon.core.railgen import rail_optimized  # noqa: E402
from fabricmon.core.topology import build_port_index  # noqa: E402


def bench_projection(phases: int = 6) -> tuple[float, float, float, int]:
    fab = rail_optimized("bench4k", servers=512, gpus_per_server=8, spines=32)
    idx = build_port_index(fab)
    layout = FabricLayout.from_spec(fab, idx)
    n = layout.n_gpus
    t = time.perf_counter()
    proj = ProjectorCache().get(layout, RankPlacement(np.arange(n)), Routing("pxn"))
    build_s = time.perf_counter() - t
    rng = np.random.default_rng(0)
    mats = [rng.random((n, n)) * 1e6 for _ in range(2)]
    proj.project(mats[0])  # warm
    t = time.perf_counter()
    for k in range(phases):
        proj.project(mats[k % 2])
    ours_ms = (time.perf_counter() - t) / phases * 1e3
    ref_ms = float("nan")
    try:
        from twin.routing import Router, Wiring

        router = Router(Wiring(fab, idx), "pxn")
        router.route(mats[0])
        t = time.perf_counter()
        for k in range(phases):
            router.route(mats[k % 2])
        ref_ms = (time.perf_counter() - t) / phases * 1e3
    except ImportError:
        pass
    return ours_ms, ref_ms, build_s, len(idx)


def bench_attribution(ports: int = 12288, hours: float = 1.0) -> tuple[float, float]:
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
    from fabricmon.core.attribution import occupancy

    m = occupancy(tl, edges) @ x * (1 + 0.05 * rng.standard_normal((len(edges) - 1, 2 * ports)))
    t = time.perf_counter()
    att = attribute(tl, edges, m)
    return time.perf_counter() - t, att.residual_rel


def main() -> None:
    ms, ref_ms, build_s, n_ports = bench_projection()
    print(f"projection: 4096 GPUs, {n_ports} ports, PXN: {ms:.1f} ms/phase "
          f"(twin router, same matrices: {ref_ms:.1f} ms/phase); routing built once in {build_s:.1f} s")
    att_s, res = bench_attribution()
    print(f"attribution: 3600 x 1 s samples x {2 * 12288} counters, 16 (layer, phase): {att_s:.1f} s (residual {res:.3f})")
    print(f"BENCH projection ms_per_phase={ms:.1f} gpus=4096 attribution_s_per_hour={att_s:.2f} twin_router_ms_per_phase={ref_ms:.1f}")


if __name__ == "__main__":
    main()
