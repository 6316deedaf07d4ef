"""Ingest benchmark: phase events accepted and stored per second per core (NDJSON batches of
1,000, validated and written by ``services.ingest_ndjson`` into a fresh SQLite file), and Kineto
trace import speed (MB/s) with peak memory for a small and a ≥ 200 MB trace — the peak must not
grow with the file size.

    .venv/bin/python bench/ingest.py [--events 200000] [--trace-mb 200] [--ranks 8]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
T0 = 1_795_987_668_367_402_543


def make_batches(n_events: int, ranks: int, batch: int) -> list[bytes]:
    import orjson  # noqa: PLC0415

    out, lines = [], []
    phases = ("dispatch", "combine", "dispatch_bwd", "combine_bwd")
    for i in range(n_events):
        rank = i % ranks
        call = i // ranks
        peers = {str(d): 4096 * (1 + (rank + d + call) % 5) for d in range(ranks)}
        lines.append(
            orjson.dumps(
                {
                    "id": f"b{i}",
                    "rank": rank,
                    "host": f"node{rank // 8}",
                    "step": call // 64,
                    "layer": (call // 4) % 16,
                    "phase": phases[call % 4],
                    "collective": "all_to_all_single",
                    "pg": "1",
                    "pg_ranks": list(range(ranks)),
                    "seq": call + 1,
                    "start_ns": T0 + i * 1000,
                    "end_ns": T0 + i * 1000 + 700,
                    "send_bytes_per_peer": peers,
                    "recv_bytes_per_peer": peers,
                    "source": "probe",
                    "time_kind": "host_call",
                }
            )
        )
        if len(lines) == batch:
            out.append(b"\n".join(lines))
            lines = []
    if lines:
        out.append(b"\n".join(lines))
    return out


def bench_ingest(n_events: int, ranks: int, batch: int, db_dir: str) -> None:
    os.environ["DATABASE_URL"] = f"sqlite:///{db_dir}/bench.sqlite3"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fabricmon.settings")
    import django  # noqa: PLC0415

    django.setup()
    from django.contrib.auth import get_user_model  # noqa: PLC0415
    from django.core.management import call_command  # noqa: PLC0415

    from fabricmon.jobs import services  # noqa: PLC0415
    from fabricmon.jobs.models import PhaseEvent, Run  # noqa: PLC0415

    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user("bench")
    run = Run.objects.create(owner=user, name="bench")
    batches = make_batches(n_events, ranks, batch)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    stored = 0
    for body in batches:
        stored += services.ingest_ndjson(run, body).stored
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    assert stored == n_events == PhaseEvent.objects.filter(run=run).count()
    again0 = time.process_time()
    dup = services.ingest_ndjson(run, batches[0])
    print(f"ingest: {n_events} events ({ranks} ranks, {ranks} peers each) in batches of {batch}, SQLite")
    print(
        f"  stored {stored / wall:,.0f} events/s wall, "
        f"{stored / cpu:,.0f} events/s per core (CPU time, 1 process)"
    )
    print(
        f"  re-sent batch: {dup.duplicates} duplicates, {dup.stored} stored, "
        f"{len(batches[0].splitlines()) / (time.process_time() - again0):,.0f} lines/s per core"
    )
    print("  reference: target >= 50,000 events/s per core")


# --- Kineto import -------------------------------------------------------------------------------


def write_trace(path: Path, target_mb: int, world: int = 8) -> int:
    """A gloo-style Kineto trace: per step, compute cpu_ops (filler, as in real traces) and a few
    annotated all-to-alls. Returns the number of all-to-alls written."""
    base = 1_790_857_026_000_000_000
    header = {
        "schemaVersion": 1,
        "deviceProperties": [],
        "record_shapes": 1,
        "distributedInfo": {
            "backend": "gloo",
            "rank": 1,
            "world_size": world,
            "pg_count": 1,
            "pg_config": [
                {"pg_name": "0", "pg_desc": "default_pg", "pg_size": world, "ranks": list(range(world))}
            ],
        },
        "host_name": "bench",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": base,
    }
    target = target_mb * 1_000_000
    n_a2a, ts = 0, 5_130_559_171_207.758
    with path.open("w") as f:
        f.write(json.dumps(header)[:-1] + ', "traceEvents": [\n')
        first = True
        while f.tell() < target:
            chunk = []
            for k in range(200):  # filler compute ops
                chunk.append(
                    {
                        "ph": "X",
                        "cat": "cpu_op",
                        "name": "aten::mm",
                        "pid": 1,
                        "tid": 1,
                        "ts": round(ts + k, 3),
                        "dur": 0.9,
                        "args": {
                            "External id": k,
                            "Input Dims": [[64, 64], [64, 64]],
                            "Input type": ["float", "float"],
                            "Ev Idx": k,
                        },
                    }
                )
            ts += 300
            splits = [1 + (n_a2a + d) % 7 for d in range(world)]
            layer, phase = (n_a2a // 2) % 8, ("dispatch", "combine")[n_a2a % 2]
            chunk.append(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": f"moe/layer{layer}/{phase}",
                    "pid": 1,
                    "tid": 1,
                    "ts": round(ts, 3),
                    "dur": 50.0,
                    "args": {},
                }
            )
            chunk.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": "c10d::alltoall_base_",
                    "pid": 1,
                    "tid": 1,
                    "ts": round(ts + 1, 3),
                    "dur": 0.5,
                    "args": {
                        "Concrete Inputs": ["", "", "", str(splits), str(splits), "False", "-1"],
                        "Input type": ["float", "float", "", "ScalarList", "ScalarList", "Scalar", "Scalar"],
                        "Input Dims": [[sum(splits), 1024], [sum(splits), 1024], [], [], [], [], []],
                    },
                }
            )
            chunk.append(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": "gloo:all_to_all",
                    "pid": 1,
                    "tid": 2,
                    "ts": round(ts + 2, 3),
                    "dur": 40.0,
                    "args": {},
                }
            )
            n_a2a += 1
            ts += 100
            text = ",\n".join(json.dumps(e) for e in chunk)
            f.write(("" if first else ",\n") + text)
            first = False
        f.write('\n], "traceName": "bench"}\n')
    return n_a2a


def _import_child(path: str) -> None:
    from collectors.traces.kineto import read_kineto  # noqa: PLC0415

    t0 = time.perf_counter()
    with open(path, "rb") as f:
        n = sum(1 for _ in read_kineto(f))
    dt = time.perf_counter() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"events": n, "seconds": dt, "peak_rss_mb": peak_kb / 1024}))


def bench_trace(sizes_mb: list[int], tmp: str) -> None:
    print("kineto import (streaming, ijson C backend), one process per file:")
    for mb in sizes_mb:
        path = Path(tmp) / f"trace_{mb}mb.json"
        n_a2a = write_trace(path, mb)
        size = path.stat().st_size
        out = subprocess.run(
            [sys.executable, __file__, "--import-child", str(path)],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        )
        res = json.loads(out.stdout.strip().splitlines()[-1])
        assert res["events"] == n_a2a, (res, n_a2a)
        print(
            f"  {size / 1e6:7.1f} MB: {size / 1e6 / res['seconds']:6.1f} MB/s, "
            f"{res['events']:,} all-to-alls, "
            f"peak RSS {res['peak_rss_mb']:.0f} MB"
        )
        path.unlink()
    print("  reference: json.load of the same file needs the whole document in memory (several x its size)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--trace-mb", type=int, default=200)
    parser.add_argument("--import-child")
    args = parser.parse_args()
    if args.import_child:
        _import_child(args.import_child)
        return
    with tempfile.TemporaryDirectory() as tmp:
        bench_ingest(args.events, args.ranks, args.batch, tmp)
        bench_trace(sorted({max(args.trace_mb // 8, 1), args.trace_mb}), tmp)


if __name__ == "__main__":
    main()
