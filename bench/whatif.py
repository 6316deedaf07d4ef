"""The What-if page's computation for a 4,096-GPU run of 100 steps, on one core.

Fabric: rail-optimized, 512 servers × 8 GPUs (16 SUs, 128 rail leaves, 32 spines, 400G). Job:
100 steps × 1 MoE layer × dispatch/combine = 200 rank×rank matrices (4096²), EP groups of 64 GPUs
(8 servers, Megatron order), top-8 of the group's experts with a Zipf-skewed popularity that
drifts per step; combine = dispatchᵀ × 2 (BF16 over FP8); one event per rank per phase.

Untimed setup: each matrix is stored as the jobs app stores it (``matrix_blobs.encode``: here
sparse (index, value) cells, the EP groups being 1/64 of the pairs) and the events as columns.

Timed, as the service runs them (``whatif/services.run_whatif`` without the SQLite fetch):
``events`` (``core.whatif.event_stats``: factorise the process-group strings, medians, rates),
``read`` (``jobs.matrix_read.cells``: each blob as its stored cells, no int64 widening), ``pass``
(``Accumulator.add``: server matrices, busiest ranks, the window's rank×rank sums) and each figure
(hierarchy, optics, collectives, routing with PXN only above 1,024 ranks, placement).

CPU seconds (``cpu_s``, and per part ``events_cpu_s``, ``pass_cpu_s`` = read + pass,
``figures_cpu_s``, ``<figure>_cpu_s``) are the measure on a shared machine: wall time there moves
with other processes' load. The timed part runs before any reference is built, so its process
holds what the service's does (the stored blobs), not the references' gigabyte of dense arrays
(whose fragmented memory made fresh allocations fault slower).

References in the same run, on the same matrices (made again after the timed part):
* ``floor``: one ``np.sum`` over every dense float32 matrix — the read no dense reader avoids;
* ``dense_pass``: the same pass fed the dense float32 matrices (what the phase state holds), the
  cost when the stored form is dense (an all-to-all across the whole world);
* ``reference``: the computation as it was before issue 17 (``tests/whatif/whatif_reference``)
  on the dense matrices — its seconds, the speed-up, and the largest relative difference between
  its figures and the fast path's (skip with ``WHATIF_REFERENCE=0``; it takes ~20 s).

Ends with ``BENCH whatif gpus=4096 steps=100 total_s=… placement_s=… optics_s=… collectives_s=…
routing_s=… hierarchy_s=… target_s=2 cpu_s=… events_s=… read_s=… pass_s=… … events_cpu_s=…
pass_cpu_s=… figures_cpu_s=… hierarchy_cpu_s=… … reference_s=… speedup=… max_rel_diff=…``.
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "whatif"))  # the pre-issue-17 reference

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fabricmon.settings")  # jobs.matrix_read sits in the jobs app
from tests import secret_env

secret_env.apply(os.environ)
import django

django.setup()

import numpy as np

from collectors.traces.schema import PHASES
from fabricmon.core.phases.layout import FabricLayout, RankPlacement
from fabricmon.core.topology.port_index import build_port_index
from fabricmon.core.topology.railgen import rail_optimized
from fabricmon.core.whatif import event_stats
from fabricmon.core.whatif.matrix_pass import Accumulator, SparseCells, server_and_busiest
from fabricmon.core.whatif.report import RANK_WINDOW_STEPS, Params, whatif
from fabricmon.jobs import matrix_blobs, matrix_read

GPUS_PER_SERVER, SERVERS, EP = 8, 512, 64
STEPS = int(os.environ.get("WHATIF_STEPS", "100"))
ROW = 7168  # FP8 dispatch rows
REFERENCE = os.environ.get("WHATIF_REFERENCE", "1") != "0"
T0_NS = 1_800_000_000_000_000_000


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
            dur = server_and_busiest(m, server_of_rank, SERVERS)[1] / 50e9  # what the links would take
            yield (step, 0, phase), m, t, t + dur
            t += dur + 0.005
        t += 0.04


def _events(n: int, timings: list[tuple[tuple[int, int, str], float, float, float]]) -> dict[str, Any]:
    """One event per rank per phase (its EP group as pg_ranks), as the event blocks' columns."""
    groups = [",".join(str(r) for r in range(g * EP, (g + 1) * EP)) for g in range(n // EP)]
    k = len(timings)
    key = np.repeat(np.arange(k), n)
    step = np.array([t[0][0] for t in timings])[key]
    phase = np.array([PHASES.index(t[0][2]) for t in timings])[key]
    start = (T0_NS + np.array([t[1] for t in timings]) * 1e9).astype(np.int64)[key]
    end = (T0_NS + np.array([t[2] for t in timings]) * 1e9).astype(np.int64)[key]
    sent = np.rint(np.array([t[3] for t in timings]) / n).astype(np.int64)[key]
    return {"step": step, "layer": np.zeros(k * n, np.int64), "phase": phase, "start_ns": start,
            "end_ns": end, "bytes_sent": sent, "pg_ranks": [groups[r // EP] for r in range(n)] * k}


def _max_rel_diff(a: Any, b: Any) -> tuple[float, str]:
    """The largest relative difference between two figure trees (and where), mismatches as inf."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return math.inf, f"keys {sorted(set(a) ^ set(b))}"
        return max((_prefix(k, _max_rel_diff(a[k], b[k])) for k in a), default=(0.0, ""))
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            return math.inf, "length"
        return max((_prefix(str(i), _max_rel_diff(x, y)) for i, (x, y) in enumerate(zip(a, b, strict=True))),
                   default=(0.0, ""))
    if isinstance(a, float | int) and isinstance(b, float | int) and not isinstance(a, bool):
        if (math.isnan(a) and math.isnan(b)) or a == b:
            return 0.0, ""
        return abs(a - b) / max(abs(a), abs(b)), ""
    return (0.0, "") if a == b else (math.inf, f"{a!r} != {b!r}")


def _prefix(k: str, d: tuple[float, str]) -> tuple[float, str]:
    return d[0], f"{k}.{d[1]}" if d[1] else k


def main() -> None:
    fab = rail_optimized("bench4k", servers=SERVERS, gpus_per_server=GPUS_PER_SERVER, spines=32)
    layout = FabricLayout.from_spec(fab, build_port_index(fab))
    n = layout.n_gpus
    placement = RankPlacement(np.arange(n))
    server_of_rank = layout.gpu_host[placement.gpu_of_rank]
    window = set(range(STEPS - RANK_WINDOW_STEPS, STEPS))
    names = list(layout.index.port_names)
    params = Params(row_bytes=ROW)
    blobs, timings = [], []
    for key, m, start, end in _matrices(n, STEPS):
        blobs.append((key, matrix_blobs.encode(m.astype(np.int64)), start, end))  # what ingest stored
        timings.append((key, start, end, float(m.sum(dtype=np.float64))))
    cols = _events(n, timings)
    print(f"setup: {len(blobs)} matrices stored in {sum(len(b[1]) for b in blobs) / 1e6:.0f} MB, "
          f"{len(cols['step'])} events")

    # -- the page, as the service computes it ---------------------------------------------------
    cpu0 = time.process_time()
    t = time.perf_counter()
    index: dict[str, int] = {}
    codes = event_stats.factorise(cols["pg_ranks"], index)
    ev = event_stats.EventArrays(cols["step"], cols["layer"], cols["phase"], cols["start_ns"], cols["end_ns"],
                                 cols["bytes_sent"], codes, tuple(index))
    summary = event_stats.summarise(ev, server_of_rank, PHASES)
    events_s = time.perf_counter() - t
    events_cpu = time.process_time() - cpu0
    acc = Accumulator(server_of_rank, SERVERS, rank_steps=window, expected_keys=len(blobs))
    read_s = pass_s = 0.0
    for key, blob, _, _ in blobs:
        t = time.perf_counter()
        c = matrix_read.cells(blob, n)
        assert c is not None
        sent = c.dense if c.dense is not None else SparseCells(n, c.index, c.values)  # type: ignore[arg-type]
        t2 = time.perf_counter()
        acc.add(key, sent, event_bytes=summary["bytes"].get(key, math.nan),
                start_s=summary["start_s"].get(key, math.nan), end_s=summary["end_s"].get(key, math.nan))
        t3 = time.perf_counter()
        read_s, pass_s = read_s + t2 - t, pass_s + t3 - t2
    pass_cpu = time.process_time() - cpu0 - events_cpu  # read + pass
    t = time.perf_counter()
    out = whatif(acc, layout, placement, params, link_gbs=50.0, ratio=summary["ratio"], measured=None,
                 port_names=names, measured_sizes=summary["sizes"])
    figures_s = time.perf_counter() - t
    cpu_s = time.process_time() - cpu0  # the same parts in CPU seconds: less moved by other load
    sec = out.pop("seconds")
    total = events_s + read_s + pass_s + figures_s

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
    c_ = {s["schedule"]: s for s in figs["collectives"]["values"]["schedules"]}
    print(f"collectives: ring {c_['allreduce ring (rank order)']['steps']} steps, tree "
          f"{c_['allreduce tree (double binary)']['steps']}")
    for mode, r in figs["routing"]["values"]["routings"].items():
        print(f"routing {mode}: peak {r['peak_bytes'] / 1e9:.3g} GB at {r['peak_port']}")
    p = figs["placement"]["values"]
    print(f"placement: suggest={p.get('suggest')} moved={p.get('ranks_moved')}")
    print("seconds per figure (wall, CPU): " + ", ".join(f"{k} {v:.2f}/{sec[k + '_cpu']:.2f}"
                                                        for k, v in sec.items() if not k.endswith("_cpu")))
    print(f"events {events_s:.2f} s, read {read_s:.2f} s, pass {pass_s:.2f} s "
          f"({1e3 * pass_s / len(blobs):.1f} ms a matrix), figures {figures_s:.2f} s: total {total:.2f} s "
          f"({cpu_s:.2f} s of CPU: events {events_cpu:.2f}, read + pass {pass_cpu:.2f}, figures "
          f"{cpu_s - events_cpu - pass_cpu:.2f})")

    # -- references, after the timed page (so its process holds what the service's does: the
    # stored blobs, not a gigabyte of dense accumulators), on the same matrices made again -------
    if REFERENCE:
        from whatif_reference import report as reference
        ref_acc = reference.Accumulator(server_of_rank, SERVERS, rank_steps=window)
    dense = Accumulator(server_of_rank, SERVERS, rank_steps=window, expected_keys=2 * STEPS)
    floor_s = dense_s = ref_pass_s = 0.0
    for (key, m, start, end), (_, _, _, ev_bytes) in zip(_matrices(n, STEPS), timings, strict=True):
        t = time.perf_counter()
        np.sum(m)
        floor_s += time.perf_counter() - t
        t = time.perf_counter()
        dense.add(key, m, event_bytes=ev_bytes, start_s=start, end_s=end)
        dense_s += time.perf_counter() - t
        if REFERENCE:
            t = time.perf_counter()
            ref_acc.add(key, m, event_bytes=ev_bytes, start_s=start, end_s=end)
            ref_pass_s += time.perf_counter() - t
    print(f"dense pass {dense_s:.2f} s ({1e3 * dense_s / len(blobs):.1f} ms a matrix) against the floor "
          f"(one np.sum each) {floor_s:.2f} s: ×{dense_s / floor_s:.2f}")
    extra = ""
    if REFERENCE:
        t = time.perf_counter()
        ref_out = reference.whatif(ref_acc, layout, placement, reference.Params(row_bytes=ROW), link_gbs=50.0,
                                   ratio=summary["ratio"], measured=None, port_names=names,
                                   measured_sizes=summary["sizes"])
        ref_s = ref_pass_s + time.perf_counter() - t
        ref_out.pop("seconds")
        diff, where = _max_rel_diff(out, ref_out)
        print(f"reference (before issue 17, dense matrices): pass {ref_pass_s:.2f} s, total {ref_s:.2f} s; "
              f"×{ref_s / total:.1f} slower; largest relative difference {diff:.2g}"
              + (f" at {where}" if where else ""))
        extra = f" reference_s={ref_s:.2f} speedup={ref_s / total:.1f} max_rel_diff={diff:.2g}"
    print(f"BENCH whatif gpus={n} steps={STEPS} total_s={total:.2f} placement_s={sec['placement']:.2f} "
          f"optics_s={sec['optics']:.2f} collectives_s={sec['collectives']:.2f} "
          f"routing_s={sec['routing']:.2f} hierarchy_s={sec['hierarchy']:.2f} target_s=2 cpu_s={cpu_s:.2f} "
          f"events_s={events_s:.2f} read_s={read_s:.2f} "
          f"pass_s={pass_s:.2f} dense_pass_s={dense_s:.2f} floor_s={floor_s:.2f} "
          f"dense_ratio_to_floor={dense_s / floor_s:.2f} events_cpu_s={events_cpu:.2f} "
          f"pass_cpu_s={pass_cpu:.2f} "
          f"figures_cpu_s={cpu_s - events_cpu - pass_cpu:.2f} "
          + " ".join(f"{k}_s={sec[k]:.2f}" for k in sec if k.endswith("_cpu")) + extra)


if __name__ == "__main__":
    main()
