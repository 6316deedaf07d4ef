"""A live reader of a large job's matrices while its events stream in: what the phase views cost
per refresh, reading a 5,632-rank job (22 expert-parallel groups of 256 ranks) as it posts.

The job's phases are ingested in batches of 325 events (as the twin's reporter posts them,
``bench/ingest_large.py``'s events); after every ``--every`` batches the reader refreshes. Each
variant runs in its own child process and SQLite database, interleaved run by run:

- ``parts`` (this tree, the phase views since 0a630e8): ``matrix_read.window`` names each key's row
  and the parts appended beside it; only rows whose (id, calls) changed and parts not seen before
  are read. Nothing is written.
- ``settle`` (the reference: the phase views before): ``matrix_parts.settle(run)`` folds every part
  into its row, then every row whose (id, calls) changed is read — each refresh rewrites the rows
  the last batches touched (11 MB blobs at 5,632 ranks).

Both read a blob as the views do before projecting it (``matrix_blobs.decode_pairs``); the
projection that follows costs in proportion to the cells decoded, the figure printed beside it.
The reader's CPU and the bytes it wrote (``wchar`` of /proc/self/io: what it passed to write(),
SQLite's WAL included) are measured around the refreshes only; ingest CPU is printed apart. The
sums every reader holds at the end are checked equal to the settled matrices.

    .venv/bin/python bench/matrix_read.py [--phases 4] [--every 2] [--repeat 3]

Prints ``BENCH matrix_read refreshes=… reader_cpu_ms_per_refresh_parts=… …_settle=…
reader_cpu_ratio=…x reader_mb_written_parts=… reader_mb_written_settle=…``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest_large import BATCH, GROUP, GROUPS, child_setup

ROOT = Path(__file__).resolve().parents[1]


def _wchar() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("wchar:"))


class _Reader:
    """The view's read of the window: key → (signature, summed cells), kept across refreshes."""

    def __init__(self, run, variant: str) -> None:  # type: ignore[no-untyped-def]
        self.run, self.variant = run, variant
        self.rows: dict = {}  # key → ((id, calls, n), decoded total of the row's cells)
        self.parts: dict = {}  # part id → decoded total
        self.cells = 0

    def _total(self, sent: bytes, n: int) -> int:
        from fabricmon.jobs import matrix_blobs

        cells, vals = matrix_blobs.decode_pairs(sent, n)
        self.cells += len(cells)
        return int(vals.sum())

    def refresh(self) -> None:
        from fabricmon.jobs import matrix_parts, matrix_read

        if self.variant == "settle":
            matrix_parts.settle(self.run)
        pieces = matrix_read.window(self.run, 0, 1 << 62, None)
        rows = {p.row[0]: k for k, p in pieces.items() if self.rows.get(k, (None,))[0] != p.row}
        parts = [pid for p in pieces.values() for pid in p.parts if pid not in self.parts]
        for mid, n, sent in matrix_read.sent_blobs(rows, ()):
            self.rows[rows[mid]] = (pieces[rows[mid]].row, self._total(sent, n))
        for mid, n, sent in matrix_read.sent_blobs((), parts):
            self.parts[mid] = self._total(sent, n)
        live = {pid for p in pieces.values() for pid in p.parts}
        self.parts = {pid: v for pid, v in self.parts.items() if pid in live}
        self.totals = {k: self.rows[k][1] + sum(self.parts[pid] for pid in p.parts)
                       for k, p in pieces.items()}


def _child(db_url: str, phases: int, every: int, variant: str) -> None:
    run, bodies = child_setup(db_url, "live", phases, "lists")
    from fabricmon.jobs import ingest, matrix_blobs, matrix_parts
    from fabricmon.jobs.models import TrafficMatrix

    reader = _Reader(run, variant)
    ingest_cpu = read_cpu = 0.0
    written = refreshes = 0
    for i, body in enumerate(bodies):
        t = time.process_time()
        res = ingest.ingest_ndjson(run, body)
        ingest_cpu += time.process_time() - t
        assert not res.rejected, res.rejected[:3]
        if (i + 1) % every == 0 or i + 1 == len(bodies):
            t, w = time.process_time(), _wchar()
            reader.refresh()
            read_cpu += time.process_time() - t
            written += _wchar() - w
            refreshes += 1
    matrix_parts.settle(run)
    want = {(m.step, m.layer, m.phase): int(matrix_blobs.decode_pairs(m.sent, m.n_ranks)[1].sum())
            for m in TrafficMatrix.objects.filter(run=run)}
    assert reader.totals == want, "the reader's sums are not the settled matrices"
    print(json.dumps({"refreshes": refreshes, "read_cpu_s": read_cpu, "ingest_cpu_s": ingest_cpu,
                      "written_mb": written / 1e6, "cells": reader.cells, "keys": len(want)}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--phases", type=int, default=4)
    ap.add_argument("--every", type=int, default=2, help="batches between refreshes")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child")
    ap.add_argument("--variant")
    a = ap.parse_args()
    if a.child:
        _child(a.child, a.phases, a.every, a.variant)
        return
    print(f"a live reader of a {GROUP * GROUPS:,}-rank job's matrices: {a.phases} phases "
          f"in batches of {BATCH}, "
          f"a refresh every {a.every} batches; load {os.getloadavg()[0]:.1f}")
    per: dict[str, list[dict]] = {"parts": [], "settle": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.repeat):
            for variant, results in per.items():
                out = subprocess.run(
                    [sys.executable, __file__, "--child", f"sqlite:///{tmp}/{variant}{i}.sqlite3",
                     "--phases", str(a.phases), "--every", str(a.every), "--variant", variant],
                    capture_output=True, text=True, cwd=ROOT, check=False,
                    env={**os.environ, "PYTHONPATH": str(ROOT)})
                if out.returncode:
                    raise SystemExit(out.stderr[-3000:])
                res = json.loads(out.stdout.strip().splitlines()[-1])
                results.append(res)
                each_ms = res["read_cpu_s"] * 1e3 / res["refreshes"]
                print(f"  {variant:>6} run {i + 1}: reader {each_ms:.0f} ms CPU a refresh over "
                      f"{res['refreshes']} refreshes, {res['cells'] / 1e6:.1f} M cells decoded, "
                      f"{res['written_mb']:.0f} MB written; ingest {res['ingest_cpu_s']:.1f} s CPU; "
                      f"load {os.getloadavg()[0]:.1f}")

    def median(variant: str, key: str) -> float:
        values = sorted(r[key] / (r["refreshes"] if key == "read_cpu_s" else 1) for r in per[variant])
        return values[len(values) // 2]

    ms = {v: median(v, "read_cpu_s") * 1e3 for v in per}
    mb = {v: median(v, "written_mb") for v in per}
    ingest = {v: median(v, "ingest_cpu_s") for v in per}
    ratio = ms["settle"] / max(ms["parts"], 1e-9)
    total = {v: ingest[v] + ms[v] * per[v][0]["refreshes"] / 1e3 for v in per}
    print(f"  median reader CPU a refresh: parts {ms['parts']:.0f} ms, settle {ms['settle']:.0f} ms "
          f"({ratio:.1f}x); "
          f"written {mb['parts']:.0f} MB against {mb['settle']:.0f} MB; ingest CPU {ingest['parts']:.1f} s "
          f"against {ingest['settle']:.1f} s (ingest folds what the reader no longer does); "
          f"ingest and reader "
          f"{total['parts']:.1f} s against {total['settle']:.1f} s; every reader's sums equal")
    refreshes = per["parts"][0]["refreshes"]
    print(f"BENCH matrix_read ranks={GROUP * GROUPS} phases={a.phases} refreshes={refreshes} "
          f"reader_cpu_ms_per_refresh_parts={ms['parts']:.0f} "
          f"reader_cpu_ms_per_refresh_settle={ms['settle']:.0f} "
          f"reader_cpu_ratio={ratio:.1f}x total_cpu_s_parts={total['parts']:.1f} "
          f"total_cpu_s_settle={total['settle']:.1f} "
          f"reader_mb_written_parts={mb['parts']:.0f} reader_mb_written_settle={mb['settle']:.0f} "
          f"ingest_cpu_s_parts={ingest['parts']:.1f} ingest_cpu_s_settle={ingest['settle']:.1f}")


if __name__ == "__main__":
    main()
