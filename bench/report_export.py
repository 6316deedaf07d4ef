"""A run's per-port bytes export (``ports.csv``, ``ports.parquet``) through a real ASGI server:
first byte, whole export and the server's memory growth for a run of ``--steps`` steps × 8 layers ×
dispatch/combine on a 256-GPU rail-optimized fabric (32 servers × 8 GPUs), beside the reference —
the same rows built in one piece (every chunk's table concatenated, then one CSV written into
memory), what an export that is not streamed holds, measured in a process of its own.

Target: first byte ≤ 1 s at any size; server memory flat (a chunk, not the run).

    .venv/bin/python bench/report_export.py [--steps 200]
"""

from __future__ import annotations

import argparse
import ast
import http.client
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

FILL = """
import numpy as np
from django.contrib.auth import get_user_model
from fabricmon.core.topology.railgen import rail_optimized
from fabricmon.jobs import matrix_blobs
from fabricmon.jobs.models import RankMapEntry, TrafficMatrix
from fabricmon.jobs.runs import create_run
from fabricmon.jobs.tokens import issue_token
from fabricmon.topology.services import import_fabric
import_fabric(rail_optimized("bench-fab", servers=32, gpus_per_server=8, spines=4, speed_gbps=400))
user = get_user_model().objects.create_user("bench", password="pw")
run = create_run(user, "export-bench", fabric="bench-fab", world_size=256)
RankMapEntry.objects.bulk_create([
    RankMapEntry(run=run, rank=r, host=f"node{{r // 8 + 1:03d}}", local_rank=r % 8) for r in range(256)])
rng = np.random.default_rng(0)
rows = []
for step in range({steps}):
    for layer in range(8):
        m = (rng.random((256, 256)) < 0.1) * rng.integers(1, 1 << 20, (256, 256))
        for phase, a in (("dispatch", m), ("combine", m.T * 2)):
            blob = matrix_blobs.encode(a)
            rows.append(TrafficMatrix(run=run, source="probe", step=step, layer=layer, phase=phase,
                                      n_ranks=256, sent=blob, received=matrix_blobs.encode(a, same_as=a),
                                      calls=256))
    if len(rows) > 512:
        TrafficMatrix.objects.bulk_create(rows)
        rows = []
TrafficMatrix.objects.bulk_create(rows)
print(repr((run.pk, issue_token(user, "bench")[1])))
"""
REFERENCE = """
import io, resource, time
import pyarrow as pa, pyarrow.csv as pacsv
from fabricmon.jobs.models import Run
from fabricmon.phases.services import PXN
from fabricmon.reports import exports
run = Run.objects.get(pk={run_id})
t = time.perf_counter()
table = pa.concat_tables(list(exports.port_tables(run, PXN)))
buf = io.BytesIO(); pacsv.write_csv(table, buf)
peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(repr((time.perf_counter() - t, peak_mb, table.num_rows)))
"""


def status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    return 0


def fetch(url: urllib.parse.SplitResult, path: str, pid: int, cookie: str) -> tuple[float, float, int, float]:
    """(first byte s, whole s, bytes, server peak growth MB) of one GET."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # reset the peak (VmHWM) to now
    rss0 = status_kb(pid, "VmRSS")
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=900)
    t0 = time.perf_counter()
    conn.request("GET", path, headers={"Cookie": cookie})
    resp = conn.getresponse()
    assert resp.status == 200, (resp.status, resp.read()[:300])
    resp.read(1)
    first = time.perf_counter() - t0
    size = 1
    while chunk := resp.read(1 << 20):
        size += len(chunk)
    return first, time.perf_counter() - t0, size, (status_kb(pid, "VmHWM") - rss0) / 1024


LOGIN = """
from django.contrib.auth import get_user_model
from django.test import Client
c = Client(); c.force_login(get_user_model().objects.get(username="bench"))
print(repr(c.cookies["sessionid"].value))
"""


def main() -> int:
    from asgi_server import live_server

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args()
    redis = subprocess.run(["redis-cli", "ping"], capture_output=True, text=True, check=False)
    if "PONG" not in redis.stdout:
        print("needs a Redis on 127.0.0.1:6379 (the server's channel layer)")
        return 2
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/9")
    server = live_server(Path(tempfile.mkdtemp(prefix="fabricmon-report-export-")), redis_url)
    try:
        t = time.perf_counter()
        out = server.manage("shell", "-c", FILL.format(steps=args.steps))
        run_id, _ = ast.literal_eval(out.strip().splitlines()[-1])
        matrices = args.steps * 16
        print(f"stored {matrices:,} matrices of 256 ranks in {time.perf_counter() - t:.1f} s", flush=True)
        cookie = "sessionid=" + ast.literal_eval(server.manage("shell", "-c", LOGIN).strip().splitlines()[-1])
        url = urllib.parse.urlsplit(server.url)
        pid = server.proc.pid
        csv_first, csv_s, csv_b, csv_mb = fetch(url, f"/jobs/runs/{run_id}/ports.csv", pid, cookie)
        pq_first, pq_s, pq_b, pq_mb = fetch(url, f"/jobs/runs/{run_id}/ports.parquet", pid, cookie)
        ref_s, ref_mb, rows = ast.literal_eval(server.manage("shell", "-c", REFERENCE.format(run_id=run_id))
                                               .strip().splitlines()[-1])
    finally:
        server.stop()
    print(f"csv      first byte {csv_first * 1e3:7.1f} ms · {csv_b / 1e6:.0f} MB in {csv_s:.1f} s · "
          f"{rows / csv_s:,.0f} rows/s · server grew {csv_mb:.0f} MB")
    print(f"parquet  first byte {pq_first * 1e3:7.1f} ms · {pq_b / 1e6:.0f} MB in {pq_s:.1f} s · "
          f"server grew {pq_mb:.0f} MB")
    print(f"reference (one piece) {ref_s:.1f} s before any byte · peak {ref_mb:.0f} MB · {rows:,} rows")
    print(f"BENCH report_export matrices={matrices} rows={rows} csv_first_byte_s={csv_first:.3f} "
          f"csv_s={csv_s:.1f} csv_mb={csv_b / 1e6:.0f} csv_server_growth_mb={csv_mb:.0f} "
          f"parquet_first_byte_s={pq_first:.3f} "
          f"parquet_s={pq_s:.1f} parquet_mb={pq_b / 1e6:.0f} parquet_server_growth_mb={pq_mb:.0f} "
          f"reference_s={ref_s:.1f} reference_peak_mb={ref_mb:.0f} target_first_byte_s=1.0")
    return 0 if max(csv_first, pq_first) <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
