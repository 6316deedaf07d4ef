"""The What-if page's computation for a 4,096-GPU run of 100 steps, on one core.

Fabric: rail-optimized, 512 servers × 8 GPUs (16 SUs, 128 rail leaves, 32 spines, 400G). Job:
100 steps × 1 MoE layer × dispatch/combine = 200 rank×rank matrices (4096², float32 as the phase
state reads them), EP groups of 64 GPUs (8 servers, Megatron order), top-8 of the group's experts
with a Zipf-skewed popularity that drifts per step; combine = dispatchᵀ × 2 (BF16 over FP8).

Timed: ``core.whatif.report``'s one pass over the 200 matrices (``Accumulator.add``) and the
figures (``whatif``: hierarchy, optics, collectives, routing with PXN/spray/3 ECMP seeds,
placement). The matrices are made by a generator outside the timing (each is made, then handed
over). Reference: the floor — one ``np.sum`` over every matrix, the read no reader can avoid.

Prints the figures and ``BENCH whatif s=… matrices=200 gpus=4096 pass_s=… figures_s=… floor_s=…
ratio_to_floor=… target_s=2``.
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

from fabricmon.core.phases.layout import FabricLayout, RankPlacement
from fabricmon.core.topology.port_index import build_port_index
from fabricmon.core.topology.railgen import rail_optimized
from fabricmon.core.whatif.report import RANK_WINDOW_STEPS, Accumulator, Params, _server_and_busiest, whatif

GPUS_PER_SERVER, SERVERS, EP = 8, 512, 64
STEPS = int(os.environ.get("WHATIF_STEPS", "100"))
ROW = 7168  # FP8 dispatch rows


def _matrices(n: int, steps: int, seed: int = 0):  # type: ignore[no-untyped-def]
    """(key, matrix, start_s, end_s) per phase: block-diagonal EP traffic, drifting Zipf popularity."""
    rng = np.random.default_rng(seed)
    groups = n // EP
    server_of_rank = np.repeat(np.arange(SERVERS), GPUS_PER_SERVER)
    pop = 1.0 / np.arange(1, EP + 1) ** 0.6
    base = np.zeros((n, n), dtype=np.float32)
    t = 0.0
    for step in range(steps):
        z = np.log(pop) + 0.3 * rng.standard_normal(EP)
        p = np.exp(z) / np.exp(z).sum()
        for g in range(groups):
            sl = slice(g * EP, (g + 1) * EP)
            base[sl, sl] = np.rint(4096 * 8 * p)[None, :] * ROW
        combine = np.ascontiguousarray(base.T) * 2  # C order, as the phase state's arrays
        for phase, m in (("dispatch", base), ("combine", combine)):
            dur = _server_and_busiest(m, server_of_rank, SERVERS)[1] / 50e9  # what the links would take
            yield (step, 0, phase), m, t, t + dur
            t += dur + 0.005
        t += 0.04


def main() -> None:
    fab = rail_optimized("bench4k", servers=SERVERS, gpus_per_server=GPUS_PER_SERVER, spines=32)
    layout = FabricLayout.from_spec(fab, build_port_index(fab))
    n = layout.n_gpus
    placement = RankPlacement(np.arange(n))
    server_of_rank = layout.gpu_host[placement.gpu_of_rank]
    acc = Accumulator(server_of_rank, SERVERS, rank_steps=set(range(STEPS - RANK_WINDOW_STEPS, STEPS)))
    pass_s = floor_s = 0.0
    for key, m, start, end in _matrices(n, STEPS):
        t = time.perf_counter()
        np.sum(m)
        floor_s += time.perf_counter() - t
        t = time.perf_counter()
        acc.add(key, m, event_bytes=float(m.sum(dtype=np.float64)), start_s=start, end_s=end)
        pass_s += time.perf_counter() - t
    t = time.perf_counter()
    out = whatif(acc, layout, placement, Params(row_bytes=ROW), link_gbs=50.0, ratio=float("nan"),
                 measured=None, port_names=list(layout.index.port_names))
    figures_s = time.perf_counter() - t
    total = pass_s + figures_s
    figs = {f["name"]: f for f in out["figures"]}
    h = figs["hierarchy"]
    print(f"hierarchy: {h['verdict']} ({'; '.join(h['withheld_because'])[:160]})")
    for b in h["always"]["breakeven_per_layer"]:
        print(f"  layer {b['layer']}: breakeven measured {b['measured']:.3g} fused {b['fused']:.3g} "
              f"zero {b['zero']:.3g}")
    o = figs["optics"]["values"] or {}
    if o:
        print(f"optics: regions of {o['region_servers']} servers, L = {o['locality_regions']:.3f}, k95 = "
              f"{o['curve']['k95']}, mix/fat-tree = {o['times_s']['mix_over_fat_tree']:.3g}, "
              f"cost ratio {o['cost'].get('cost_ratio', float('nan')):.3g}")
    c = {s["schedule"]: s for s in figs["collectives"]["values"]["schedules"]}
    print(f"collectives: ring {c['allreduce ring (rank order)']['steps']} steps, tree "
          f"{c['allreduce tree (double binary)']['steps']}")
    for mode, r in figs["routing"]["values"]["routings"].items():
        print(f"routing {mode}: peak {r['peak_bytes'] / 1e9:.3g} GB at {r['peak_port']}")
    p = figs["placement"]["values"]
    print(f"placement: suggest={p.get('suggest')} moved={p.get('ranks_moved')}")
    print("seconds per figure: " + ", ".join(f"{k} {v:.2f}" for k, v in out["seconds"].items()))
    each_ms = 1e3 * pass_s / len(acc.keys)
    print(f"one pass over {len(acc.keys)} matrices {pass_s:.2f} s ({each_ms:.1f} ms each), "
          f"figures {figures_s:.2f} s, floor (one np.sum each) {floor_s:.2f} s")
    print(f"BENCH whatif s={total:.2f} matrices={len(acc.keys)} gpus={n} pass_s={pass_s:.2f} "
          f"figures_s={figures_s:.2f} floor_s={floor_s:.2f} ratio_to_floor={total / floor_s:.1f} target_s=2")


if __name__ == "__main__":
    main()
