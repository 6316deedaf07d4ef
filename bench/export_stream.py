"""Events export benchmark: first byte, whole export and the server's memory growth for a run of
``--events`` events (default 1 M) exported through a real ASGI server (tests/asgi_server.py), beside
the reference — what the export did before: Django collected the sync iterator into a list under
ASGI, so its first byte came only after every event was read and serialised (measured here as the
time to build that list in a process of its own, and its memory).

Target (issue 12): first byte ≤ 1 s at any size, flat server memory.

    .venv/bin/python bench/export_stream.py [--events 1000000] [--ranks 256]
"""

from __future__ import annotations

import argparse
import ast
import http.client
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
from django.contrib.auth import get_user_model
from fabricmon.jobs.runs import create_run
from fabricmon.jobs.tokens import issue_token
from tests.jobs.long_runs import fill_run
user = get_user_model().objects.create_user("bench", password="pw")
run = create_run(user, "export-bench", world_size={ranks})
fill_run(run, {events}, ranks={ranks})
print(repr((run.pk, issue_token(user, "bench")[1])))
"""
REFERENCE = """
import orjson, resource, time
from fabricmon.jobs import blocks
from fabricmon.jobs.models import Run
run = Run.objects.get(pk={run_id})
t = time.perf_counter()
body = [orjson.dumps(e) + b"\\n" for e in blocks.iter_events(run)]
print(repr((time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)))
"""


def status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    return 0


def main() -> int:
    from asgi_server import live_server

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--ranks", type=int, default=256)
    args = ap.parse_args()
    redis = subprocess.run(["redis-cli", "ping"], capture_output=True, text=True, check=False)
    if "PONG" not in redis.stdout:
        print("needs a Redis on 127.0.0.1:6379 (the server's channel layer)")
        return 2
    server = live_server(Path(tempfile.mkdtemp(prefix="fabricmon-export-")), "redis://127.0.0.1:6379/9")
    try:
        t = time.perf_counter()
        out = server.manage("shell", "-c", FILL.format(events=args.events, ranks=args.ranks))
        run_id, token = ast.literal_eval(out.strip().splitlines()[-1])
        print(f"stored {args.events:,} events in {time.perf_counter() - t:.1f} s", flush=True)
        url = urllib.parse.urlsplit(server.url)
        pid = server.proc.pid
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        rss0 = status_kb(pid, "VmRSS")
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=600)
        t0 = time.perf_counter()
        auth = {"Authorization": f"Bearer {token}"}
        conn.request("GET", f"/jobs/api/runs/{run_id}/events", headers=auth)
        resp = conn.getresponse()
        resp.readline()
        first_s = time.perf_counter() - t0
        size = 0
        while chunk := resp.read(1 << 20):
            size += len(chunk)
        total_s = time.perf_counter() - t0
        grew_mb = (status_kb(pid, "VmHWM") - rss0) / 1024
        ref_s, ref_mb = ast.literal_eval(server.manage("shell", "-c", REFERENCE.format(run_id=run_id))
                                         .strip().splitlines()[-1])
    finally:
        server.stop()
    print(f"streamed   first byte {first_s * 1e3:8.1f} ms · all {size / 1e6:.0f} MB in {total_s:.1f} s · "
          f"server grew {grew_mb:.0f} MB")
    print(f"reference  first byte ≥ {ref_s * 1e3:8.1f} ms (the whole list built first) · "
          f"peak {ref_mb:.0f} MB")
    print(f"BENCH export_stream events={args.events} first_byte_s={first_s:.3f} total_s={total_s:.1f} "
          f"mb={size / 1e6:.0f} server_growth_mb={grew_mb:.0f} reference_first_byte_s={ref_s:.1f} "
          f"reference_peak_mb={ref_mb:.0f} first_byte_speedup={ref_s / first_s:.0f} target_first_byte_s=1.0")
    return 0 if first_s <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
