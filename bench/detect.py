"""Detection cost per window at 16,384 ports (target ≤ 5 ms per core).

Fabric: 1,024 servers × 8 GPUs in 32 SUs, 256 rail-leaves with 32 host ports + 16 uplinks (2:1),
4 spines → 16,384 ports. Each window: balanced background, ~1 % microbursts, two hot ports that
jump every 3 windows, so the moving-incast path (Jaccard, dwell, jumps) runs for real.
Side by side: the same incast predicate as a per-port Python loop (what a naive rule engine does).

    .venv/bin/python bench/detect.py [--windows 200]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, no install needed

from fabricmon.core.detection.conditions import conditions
from fabricmon.core.detection.config import DetectConfig
from fabricmon.core.detection.geometry import fabric_geometry
from fabricmon.core.detection.window import MovingState, detect_window
from fabricmon.core.topology.port_index import build_port_index
from fabricmon.core.topology.railgen import rail_optimized


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--windows", type=int, default=200)
    args = ap.parse_args()
    fabric = rail_optimized("bench", servers=1024, gpus_per_server=8, spines=4, uplinks_per_leaf=16)
    index = build_port_index(fabric)
    geo = fabric_geometry(index, fabric)
    n = len(index)
    cfg = DetectConfig()
    rng = np.random.default_rng(0)
    host = np.flatnonzero(geo.is_leaf_host)
    frames = []
    for t in range(32):
        util = np.where(geo.is_leaf_host, rng.uniform(0.25, 0.45, n), rng.uniform(0, 0.3, n)).astype(
            np.float32
        )
        wm = rng.lognormal(np.log(0.1 * cfg.watermark_kmax_bytes), 0.5, n).astype(np.float32)
        ecn = np.zeros(n, np.float32)
        burst = rng.random(n) < 0.01
        wm[burst] *= 15
        ecn[burst] = 2000
        hot = rng.choice(host, 2, replace=False) if t % 3 == 0 or t == 0 else hot  # noqa: F821
        util[hot], wm[hot], ecn[hot] = 0.97, 4 * cfg.watermark_kmax_bytes, 1e5
        fan = np.where(geo.is_leaf_host, 31, 2).astype(np.float32)
        metrics = {
            "out_bps": util * geo.speed_bps,
            "util": util,
            "watermark_bytes": wm,
            "ecn_marked_ps": ecn,
            "pfc_pause_ps": np.zeros(n, np.float32),
            "pfc_paused_fraction": rng.uniform(0, 0.05, n).astype(np.float32),
        }
        frames.append((metrics, fan))

    state = MovingState.initial(n)
    for metrics, fan in frames[:5]:  # warm-up
        state, _ = detect_window(metrics, geo, state, cfg, fan_in=fan)
    t0 = time.process_time()
    moving = 0
    for i in range(args.windows):
        metrics, fan = frames[i % len(frames)]
        state, found = detect_window(metrics, geo, state, cfg, ts_ns=i, fan_in=fan)
        conditions(found, geo)
        moving += found.moving
    ms = (time.process_time() - t0) * 1e3 / args.windows

    # Reference: the incast predicate alone, one port at a time in Python.
    metrics, fan = frames[0]
    ref_windows = 3
    t0 = time.process_time()
    for _ in range(ref_windows):
        load = metrics["util"]
        hot_py = [
            p
            for p in range(n)
            if geo.incast_candidate[p]
            and fan[p] >= cfg.fan_in_min
            and (
                metrics["watermark_bytes"][p] >= cfg.watermark_kmax_bytes
                or metrics["ecn_marked_ps"][p] >= cfg.ecn_min_ps
            )
            and load[p] >= cfg.load_min
        ]
    ref_ms = (time.process_time() - t0) * 1e3 / ref_windows
    print(f"ports={n} windows={args.windows} moving_windows={moving} cpu_count={os.cpu_count()}")
    print(
        f"reference per-port Python loop (incast predicate only): {ref_ms:.1f} ms/window ({len(hot_py)} hot)"
    )
    print(f"BENCH detect ms_per_window={ms:.3f} ports={n}")


if __name__ == "__main__":
    main()
