"""Per-stage costs at a deployment's port count, for sizing (docs/deploy.md): CPU and bytes per frame.

What one tick of one fabric costs in the stages whose work follows the port count, measured on a
rail-optimized fabric of about ``--ports`` ports with every metric the collectors fill (SNMP's
six and gNMI's queue telemetry: eleven float32 per port):

* the frame's wire form (``Frame.encode``: what the framer writes to the live window each tick)
  and reading it back (``Frame.decode``: what every reader pays — evaluation, each heatmap socket);
* detection over one window (``detect_window`` + ``conditions``: the evaluation worker, per tick);
* one history step (``downsample`` of a minute of 1 s frames) and the row it stores (bytes).

The SNMP/gNMI polling itself is measured per varbind / per update by ``bench/snmp_poll.py`` (d)
and ``bench/gnmi_ingest.py``; docs/deploy.md puts these together.

    .venv/bin/python bench/deploy_sizing.py [--ports 100000] [--windows 20]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, no install needed

from fabricmon.core.detection.conditions import conditions
from fabricmon.core.detection.config import DetectConfig
from fabricmon.core.detection.geometry import fabric_geometry
from fabricmon.core.detection.window import MovingState, detect_window
from fabricmon.core.telemetry.downsample import downsample
from fabricmon.core.telemetry.frames import Frame
from fabricmon.core.topology.port_index import build_port_index
from fabricmon.core.topology.railgen import rail_optimized

METRICS = ("in_bps", "out_bps", "util", "in_discards_ps", "out_discards_ps", "in_errors_ps", "ecn_marked_ps",
           "pfc_pause_ps", "pfc_paused_fraction", "watermark_bytes", "drops_ps")


def cpu_ms(fn, repeat: int) -> float:
    """CPU milliseconds per call of ``fn`` (process time: a shared box's other load is not counted)."""
    fn()
    t0 = time.process_time()
    for _ in range(repeat):
        fn()
    return (time.process_time() - t0) * 1e3 / repeat


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ports", type=int, default=100_000)
    ap.add_argument("--windows", type=int, default=20)
    args = ap.parse_args()
    # 1,024 servers x 8 GPUs with 16 uplinks per leaf and 4 spines is 16,384 ports (bench/detect.py)
    servers = max(32, round(1024 * args.ports / 16_384 / 32) * 32)
    fabric = rail_optimized("sizing", servers=servers, gpus_per_server=8, spines=4, uplinks_per_leaf=16)
    index = build_port_index(fabric)
    n = len(index)
    geo = fabric_geometry(index, fabric)
    rng = np.random.default_rng(0)
    cfg = DetectConfig()

    def frame(t: int) -> Frame:
        util = np.where(geo.is_leaf_host, rng.uniform(0.25, 0.45, n), rng.uniform(0, 0.3, n))
        util = util.astype(np.float32)
        m = {name: rng.uniform(0, 1e3, n).astype(np.float32) for name in METRICS}
        m["util"], m["out_bps"] = util, (util * geo.speed_bps).astype(np.float32)
        wm = rng.lognormal(np.log(0.1 * cfg.watermark_kmax_bytes), 0.5, n)
        m["watermark_bytes"] = wm.astype(np.float32)
        return Frame("sizing", index.version, t * 1_000_000_000, 1.0, m)

    frames = [frame(t) for t in range(60)]
    blob = frames[0].encode()
    encode_ms = cpu_ms(frames[0].encode, 10)
    decode_ms = cpu_ms(lambda: Frame.decode(blob), 10)
    fan = np.where(geo.is_leaf_host, 31, 2).astype(np.float32)
    state = [MovingState.initial(n)]

    def detect() -> None:
        f = frames[len(frames) // 2]
        state[0], found = detect_window(dict(f.metrics), geo, state[0], cfg, fan_in=fan)
        conditions(found, geo)

    detect_ms = cpu_ms(detect, args.windows)
    history_ms = cpu_ms(lambda: downsample(frames, end_ns=frames[-1].ts_ns, step_s=60.0), 3)
    history_bytes = len(downsample(frames, end_ns=frames[-1].ts_ns, step_s=60.0).encode())
    print(f"ports={n} ({servers} servers x 8 GPUs, {len(fabric.switches)} switches), metrics={len(METRICS)}")
    print(f"frame: {len(blob) / 1e6:.2f} MB; encode {encode_ms:.1f} ms, decode {decode_ms:.1f} ms of CPU")
    print(f"detection: {detect_ms:.1f} ms of CPU per window")
    print(f"history: downsample of 60 frames {history_ms:.0f} ms of CPU, "
          f"row blob {history_bytes / 1e6:.2f} MB")
    print(f"BENCH deploy_sizing ports={n} switches={len(fabric.switches)} frame_mb={len(blob) / 1e6:.2f} "
          f"encode_ms={encode_ms:.1f} decode_ms={decode_ms:.1f} detect_ms={detect_ms:.1f} "
          f"history_ms={history_ms:.0f} history_row_mb={history_bytes / 1e6:.2f}")


if __name__ == "__main__":
    main()
