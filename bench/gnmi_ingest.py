"""gNMI ingest: updates decoded into frame arrays per CPU-second, ours vs pygnmi's own loop.

One twin gNMI target (a separate process, so its CPU is not counted) serves N ports × 8 counter
leaves at a fixed sample interval. In this process, in turn:

1. fabricmon's collector (collectors/gnmi: grpc.aio + TargetArrays decode into numpy), then
2. pygnmi's ``subscribe2`` STREAM loop (its thread + ``telemetryParser``) on the same target,

each for ``--seconds``; CPU time of this process (all threads) is the denominator.

    .venv/bin/python bench/gnmi_ingest.py [--ports 4096] [--seconds 6] [--interval 0.25]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LEAVES8 = (
    "in_octets",
    "out_octets",
    "out_discards",
    "q_tx_octets",
    "q_dropped_pkts",
    "q_ecn_marked_pkts",
    "q_max_len",
    "pfc_tx_frames",
)

SERVER = """
import sys, time, numpy as np
sys.path.insert(0, {root!r})
from twin.gnmi_target import GnmiFabric
from twin.gnmi_sources import QueueCounterSource
n = {n}
rng = np.random.default_rng(0)
lam = [rng.uniform(0, 1.5, n) * 50e9 for _ in range(8)]
src = QueueCounterSource([f"Ethernet{{i}}" for i in range(n)], np.full(n, 400e9), lambda k: lam[k % 8],
                         phase_s=0.05, history=4)
fab = GnmiFabric({{"bench": src}}).start()
print(fab.ports["bench"], flush=True)
sys.stdin.read()
fab.stop()
"""


def run_ours(port: int, names: tuple[str, ...], seconds: float, interval: float) -> tuple[int, float]:
    from collectors.gnmi.session import GnmiCollector, GnmiTargetSpec

    async def main() -> tuple[int, float]:
        spec = GnmiTargetSpec("bench", "127.0.0.1", port, names, sample_interval_s=interval, leaves=LEAVES8)
        coll = GnmiCollector([spec], seed=1)
        coll.start()
        s = coll.sessions["bench"]
        if not await s.wait_synced(60):
            raise RuntimeError(f"collector never synced: {s.health()}")
        u0, c0 = s.arrays.updates, time.process_time()
        await asyncio.sleep(seconds)
        u1, c1 = s.arrays.updates, time.process_time()
        await coll.stop()
        return u1 - u0, c1 - c0

    return asyncio.run(main())


def run_pygnmi(port: int, seconds: float, interval: float) -> tuple[int, float]:
    from pygnmi.client import gNMIclient

    from collectors.gnmi.paths import LEAF_INDEX, LEAVES

    paths = []
    for key in LEAVES8:
        leaf = LEAVES[LEAF_INDEX[key]]
        parts = []
        for name, kv in leaf.elems:
            keys = "".join(f"[{k}={'*' if not isinstance(v, str) else v}]" for k, v in kv)
            parts.append(name + keys)
        paths.append("/" + "/".join(parts))
    sub = {
        "mode": "stream",
        "encoding": "proto",
        "subscription": [
            {"path": p, "mode": "sample", "sample_interval": int(interval * 1e9)} for p in paths
        ],
    }
    opts = [("grpc.max_receive_message_length", 256 * 1024 * 1024)]  # one sample is ~4 MB
    with gNMIclient(target=("127.0.0.1", port), insecure=True, gnmi_timeout=30, grpc_options=opts) as gc:
        stream = gc.subscribe2(subscribe=sub)
        stream.get_update(timeout=60)  # initial snapshot, coalesced until sync
        n, c0, t_end = 0, time.process_time(), time.monotonic() + seconds
        while time.monotonic() < t_end:
            try:
                msg = stream.get_update(timeout=max(0.01, t_end - time.monotonic()))
            except Exception:
                break
            n += len(msg.get("update", {}).get("update", []))
        c1 = time.process_time()
    return n, c1 - c0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ports", type=int, default=4096)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--interval", type=float, default=0.25)
    a = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER.format(root=str(ROOT), n=a.ports)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        port = int(server.stdout.readline())  # type: ignore[union-attr]
        names = tuple(f"Ethernet{i}" for i in range(a.ports))
        ours_n, ours_cpu = run_ours(port, names, a.seconds, a.interval)
        py_n, py_cpu = run_pygnmi(port, a.seconds, a.interval)
    finally:
        server.stdin.close()  # type: ignore[union-attr]
        server.wait(10)
    ours = ours_n / max(ours_cpu, 1e-9)
    theirs = py_n / max(py_cpu, 1e-9)
    print(f"ports={a.ports} leaves=8 sample_interval={a.interval}s window={a.seconds}s")
    print(f"fabricmon collector: {ours_n} updates in {ours_cpu:.2f} CPU-s → {ours:,.0f} updates/s/core")
    print(f"pygnmi subscribe2:   {py_n} updates in {py_cpu:.2f} CPU-s → {theirs:,.0f} updates/s/core")
    print(
        f"BENCH gnmi_ingest updates_per_s_per_core={ours:.0f} pygnmi_updates_per_s={theirs:.0f} "
        f"ratio={ours / max(theirs, 1e-9):.2f}"
    )


if __name__ == "__main__":
    main()
