"""What a Prometheus scrape of ``/metrics`` costs (target: well under 100 ms for the demo's 768 ports).

Two parts:

1. Formatting the per-port families of one frame — ``fabricmon/metrics/ports.py`` (label sets
   escaped once per topology version, values formatted from numpy) beside the reference, the same
   families built with ``prometheus_client`` (``GaugeMetricFamily.add_metric`` per port and
   ``generate_latest``), at 768 ports (32 servers × 8 GPUs, 4 spines) and 16,384 ports (1,024 × 8,
   16 uplinks a leaf), every frame metric present. The two outputs are checked to hold the same samples.
2. The whole scrape, as Prometheus sees it: ``GET /metrics`` with the token on a real
   ``python -m fabricmon.serve`` whose database holds the 768-port fabric and whose Redis holds its
   live window (a fresh frame, switch health, a hot set), timed at the client.

    .venv/bin/python bench/metrics.py [--scrapes 50]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from fabricmon.core.telemetry.frames import METRICS, Frame
from fabricmon.core.topology.port_index import PortIndex, build_port_index
from fabricmon.core.topology.railgen import rail_optimized
from fabricmon.metrics import ports

TOKEN = "bench-token"


def fake_peers(index: PortIndex) -> list[str]:
    return [f"node{p // 8:04d} gpu{p % 8} mlx5_{p % 8}" if index.host_facing[p]
            else f"spine{p % 4}:Ethernet{p}" for p in range(len(index))]


def frame_for(name: str, index: PortIndex, rng: np.random.Generator) -> Frame:
    n = len(index)
    metrics = {m: rng.uniform(0, 1, n).astype(np.float32) for m in METRICS}
    metrics["in_bps"] *= 4e11
    metrics["out_bps"] *= 4e11
    return Frame(name, index.version, time.time_ns(), 1.0, metrics)


def reference_text(frame: Frame, index: PortIndex, peers: list[str]) -> bytes:
    """The per-port families as prometheus_client would expose them."""
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.exposition import generate_latest
    from prometheus_client.registry import Collector, CollectorRegistry

    names = ["fabric", "switch", "port", "rail", "role", "peer_host", "peer_gpu", "peer_port"]
    label_values = []
    for p in range(len(index)):
        host, gpu, peer_port = ports.split_peer(peers[p])
        rail = int(index.rail[p])
        role = "spine" if rail < 0 else "downlink" if index.host_facing[p] else "uplink"
        label_values.append([frame.fabric, index.switch_names[int(index.switch_of[p])], index.port_names[p],
                             str(rail) if rail >= 0 else "", role, host, gpu, peer_port])

    class PerPort(Collector):
        def collect(self):  # type: ignore[no-untyped-def]
            families: dict[str, GaugeMetricFamily] = {}
            for fam in ports.FAMILIES:
                extra = [fam.extra.split("=")[0]] if fam.extra else []
                g = families.get(fam.name)
                if g is None:
                    g = families[fam.name] = GaugeMetricFamily(fam.name, fam.help, labels=names + extra)
                vals = (frame.metrics[fam.metric] * fam.scale).astype(np.float64)
                ev = [fam.extra.split("=")[1].strip('"')] if fam.extra else []
                for p, v in enumerate(vals.tolist()):
                    g.add_metric(label_values[p] + ev, v)
            yield from families.values()

    reg = CollectorRegistry(auto_describe=False)
    reg.register(PerPort())
    return generate_latest(reg)


def time_ms(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    best = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(best)


def formatting(servers: int, repeat: int, uplinks: int | None = None) -> tuple[int, float, float, float]:
    spec = rail_optimized("bench", servers=servers, gpus_per_server=8, spines=4, uplinks_per_leaf=uplinks)
    index = build_port_index(spec)
    peers = fake_peers(index)
    frame = frame_for("bench", index, np.random.default_rng(0))
    t0 = time.perf_counter()
    labels = ports.build_labels("bench", index, peers)
    labels_ms = (time.perf_counter() - t0) * 1e3
    sample = ports.PortsSample(frame, np.arange(len(index)), labels, np.arange(0))
    ours = time_ms(lambda: ports.exposition([sample]), repeat)
    ref = time_ms(lambda: reference_text(frame, index, peers), max(2, repeat // 5))
    n_ours = sum(1 for line in ports.exposition([sample]).splitlines() if line and line[0] != "#")
    ref_text = reference_text(frame, index, peers).decode()
    n_ref = sum(1 for line in ref_text.splitlines() if line and line[0] != "#")
    assert n_ours == n_ref, (n_ours, n_ref)
    print(f"  {len(index):6d} ports, {n_ours:7d} samples: fabricmon {ours:7.1f} ms  prometheus_client "
          f"{ref:7.1f} ms  ({ref / ours:.1f}x)   labels built once per topology version: {labels_ms:.1f} ms")
    return len(index), ours, ref, labels_ms


def whole_scrape(scrapes: int, servers: int = 32, uplinks: int | None = None) -> tuple[float, float, int]:
    """Median and p95 ms of GET /metrics on a real server with the fabric (default: the demo's
    768 ports), and its size."""
    import asgi_server
    import redis

    from fabricmon.core.topology.yaml_dump import dump_fabric

    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    tmp = Path(tempfile.mkdtemp(prefix="bench-metrics-"))
    name = f"benchmetrics{os.getpid()}"
    spec = rail_optimized(name, servers=servers, gpus_per_server=8, spines=4, uplinks_per_leaf=uplinks)
    (tmp / "fabric.yaml").write_text(dump_fabric(spec))
    server = asgi_server.live_server(tmp, redis_url, FABRICMON_METRICS_TOKEN=TOKEN)
    r = redis.Redis.from_url(redis_url)
    try:
        server.manage("load_topology", str(tmp / "fabric.yaml"))
        index = build_port_index(spec)
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fabricmon.settings")
        from fabricmon.base import keys
        from fabricmon.telemetry import live_window

        for sw in spec.switches:
            live_window.write_health(r, name, sw.name, {"up": True, "poll_ms": 12.5, "polls": 100,
                                                        "last_success_ns": time.time_ns(), "interval_s": 1.0})
        r.set(keys.alerts_state(name), f'{{"topo": "{index.version}", "hot": [3, 40], "dwell": [1, 1]}}')
        rng = np.random.default_rng(1)
        times, size = [], 0
        for i in range(scrapes):
            live_window.append(r, frame_for(name, index, rng), max_frames=600)  # a fresh frame each time
            req = urllib.request.Request(f"{server.url}/metrics",
                                         headers={"Authorization": f"Bearer {TOKEN}"})
            t0 = time.perf_counter()
            with urllib.request.urlopen(req, timeout=30) as resp:
                body = resp.read()
            if i:  # the first scrape builds the fabric view and label cache
                times.append((time.perf_counter() - t0) * 1e3)
            size = len(body)
    finally:
        live_window.forget(r, name)
        r.delete(keys.alerts_state(name))
        server.stop()
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))], size


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scrapes", type=int, default=50)
    ap.add_argument("--large", action="store_true",
                    help="also scrape a 16,384-port fabric (FABRICMON_METRICS_MAX_PORTS applies)")
    args = ap.parse_args()
    print("per-port families of one frame (median of repeats):")
    n768, ours768, ref768, _ = formatting(32, 20)
    _, ours16k, ref16k, labels16k = formatting(1024, 5, uplinks=16)  # 16,384 ports, as bench/detect.py
    print(f"GET /metrics on a real server, {n768} ports, {args.scrapes} scrapes:")
    med, p95, size = whole_scrape(args.scrapes)
    print(f"  median {med:.1f} ms, p95 {p95:.1f} ms, {size / 1024:.0f} KiB")
    large = ""
    if args.large:
        print(f"GET /metrics on a real server, 16384 ports, {args.scrapes // 5} scrapes:")
        lmed, lp95, lsize = whole_scrape(max(3, args.scrapes // 5), servers=1024, uplinks=16)
        print(f"  median {lmed:.1f} ms, p95 {lp95:.1f} ms, {lsize / 1024:.0f} KiB")
        large = f" scrape_16k_ms={lmed:.1f}"
    print(f"BENCH metrics scrape_768_ms={med:.1f} scrape_768_p95_ms={p95:.1f} format_768_ms={ours768:.2f} "
          f"format_768_prometheus_client_ms={ref768:.1f} ratio_768={ref768 / ours768:.1f} "
          f"format_16k_ms={ours16k:.1f} "
          f"format_16k_prometheus_client_ms={ref16k:.1f} ratio_16k={ref16k / ours16k:.1f} "
          f"labels_16k_ms={labels16k:.0f}{large}")


if __name__ == "__main__":
    main()
