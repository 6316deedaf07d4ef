"""Ingest of a large job's phase events: what a 5,632-rank MoE job (22 expert-parallel groups of
256 ranks) costs the server per event, through the exact server path (``ingest.ingest_ndjson``),
on SQLite and PostgreSQL.

Each phase is 5,632 events of 256 peers (every rank's row and column of its group's block), in
batches of 325 events, as the twin's reporter posts them (~2 MB of JSON a batch). Measured, each
in its own child process and database, interleaved run by run:

- ``lists``: this tree, the per-pg-rank lists (``send_bytes_per_pg_rank``), the probe's form;
- ``maps``: this tree, the same events as peer maps (``send_bytes_per_peer``);
- ``prev``: the ``--against`` tree (default: before matrix parts and lists), the same maps.

The figure is CPU µs per event: the ingesting process plus, on PostgreSQL, its backend; for this
tree the run's matrices are also settled (``matrix_parts.settle``, what a reader of the run does
first), and that CPU is charged too. The stored matrices of every run are checked to hold the
same bytes. At the default reporting cadence a 5,632-rank job posts one step of 64 phases in a
block: the line ``block_cpu_s`` is that step's events times the per-event figure.

    .venv/bin/python bench/ingest_large.py [--phases 4] [--repeat 3] [--against REV]
        [--pg postgres://postgres@127.0.0.1:5432/postgres | --pg ""]

Last measured (2026-12-05, --repeat 3, load 1.0-1.9): SQLite lists 196 / maps 212 / 105058c 659 µs
an event (3.4x); PostgreSQL with lz4 blobs 272 / 274 / 1,896 (7.0x); the table is in docs/jobs.md
("Large groups").
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest import _backend_cpu_s, _cpu_s, _pg_database, previous_tree

ROOT = Path(__file__).resolve().parents[1]
T0 = 1_795_987_668_367_402_543
GROUP, GROUPS, BATCH = 256, 22, 325
PHASES_OF_STEP = 64  # 16 layers x (dispatch, combine, and their backward)
PREVIOUS = "105058c"  # before matrix parts and per-pg-rank lists


def phase_lines(phase_no: int, form: str) -> list[bytes]:
    """One phase's events: every rank of every group, its group's row and column."""
    import numpy as np
    import orjson

    rng = np.random.default_rng(phase_no)
    kind = ("dispatch", "combine", "dispatch_bwd", "combine_bwd")[phase_no % 4]
    lines = []
    for k in range(GROUPS):
        block = (rng.integers(1, 50, size=(GROUP, GROUP)) * 14336).tolist()
        cols = [list(c) for c in zip(*block, strict=True)]
        ranks = list(range(k * GROUP, (k + 1) * GROUP))
        for i, rank in enumerate(ranks):
            e = {"id": f"L{phase_no}-{rank}", "rank": rank, "host": f"node{rank // 8:03d}", "step": 0,
                 "layer": phase_no // 4, "phase": kind, "collective": "all_to_all_single", "pg_ranks": ranks,
                 "start_ns": T0 + phase_no * 10**7, "end_ns": T0 + phase_no * 10**7 + 5 * 10**6,
                 "source": "probe", "time_kind": "host_call"}
            if form == "lists":
                e["send_bytes_per_pg_rank"], e["recv_bytes_per_pg_rank"] = block[i], cols[i]
            else:
                keys = [str(r) for r in ranks]
                e["send_bytes_per_peer"] = dict(zip(keys, block[i], strict=True))
                e["recv_bytes_per_peer"] = dict(zip(keys, cols[i], strict=True))
            lines.append(orjson.dumps(e))
    return lines


def child_setup(db_url: str, name: str, phases: int, form: str) -> tuple[Any, list[bytes]]:
    """In a bench child: Django on ``db_url`` migrated, one run of the large job and its phases'
    events as the twin's reporter posts them (batches of BATCH NDJSON lines). Shared with
    bench/matrix_read.py's child."""
    os.environ["DATABASE_URL"] = db_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fabricmon.settings")
    from tests import secret_env

    secret_env.apply(os.environ)
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from fabricmon.jobs.models import Run

    call_command("migrate", verbosity=0)
    run = Run.objects.create(owner=get_user_model().objects.create_user("bench"), name=name,
                             world_size=GROUP * GROUPS)
    lines = [line for p in range(phases) for line in phase_lines(p, form)]
    return run, [b"\n".join(lines[a: a + BATCH]) for a in range(0, len(lines), BATCH)]


def _child(db_url: str, phases: int, form: str) -> None:
    """One measured ingest into a fresh database; prints one JSON line."""
    run, bodies = child_setup(db_url, "large", phases, form)
    import hashlib

    from django.db import connection

    from fabricmon.jobs import ingest
    from fabricmon.jobs.models import TrafficMatrix

    backend = None
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            backend = cursor.fetchone()[0]
    gc.collect()
    wall0, cpu0, db0 = time.perf_counter(), _cpu_s(), _backend_cpu_s(backend)
    stored = 0
    for body in bodies:
        res = ingest.ingest_ndjson(run, body)
        assert not res.rejected, res.rejected[:3]
        stored += res.stored
    ingest_cpu = _cpu_s() - cpu0
    try:
        from fabricmon.jobs import matrix_parts  # (this tree: what a reader does before reading)
    except ImportError:
        matrix_parts = None
    if matrix_parts is not None:
        matrix_parts.settle(run)
    wall, cpu, db_cpu = time.perf_counter() - wall0, _cpu_s() - cpu0, _backend_cpu_s(backend) - db0
    digest = hashlib.sha256()
    for m in TrafficMatrix.objects.filter(run=run).order_by("step", "layer", "phase"):
        digest.update(m.sent_array().tobytes() + m.received_array().tobytes())
    print(json.dumps({"stored": stored, "wall_s": wall, "cpu_s": cpu, "db_cpu_s": db_cpu,
                      "ingest_cpu_s": ingest_cpu, "body_mb": sum(map(len, bodies)) / 1e6,
                      "matrices": digest.hexdigest()[:16]}))


def _one(tree: Path, url: str, phases: int, form: str) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", url, "--phases", str(phases), "--form", form],
        capture_output=True, text=True, cwd=tree, check=False,
        env={**os.environ, "PYTHONPATH": f"{tree}:{ROOT}", "FABRICMON_BENCH_TREE": str(tree)},
    )
    if out.returncode:
        raise SystemExit(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--phases", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--against", default=PREVIOUS)
    parser.add_argument("--pg", default=os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--child")
    parser.add_argument("--form", default="lists")
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.phases, args.form)
        return
    events = args.phases * GROUP * GROUPS
    print(f"ingest of a {GROUP * GROUPS:,}-rank job ({GROUPS} groups of {GROUP}): {args.phases} phases, "
          f"{events:,} events of {GROUP} peers, batches of {BATCH}; load {os.getloadavg()[0]:.1f}")
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        variants = [("lists", ROOT, "lists"), ("maps", ROOT, "maps")]
        if args.against:
            variants.append(("prev", previous_tree(args.against, tmp), "maps"))
        for db in ["sqlite"] + (["postgresql"] if args.pg else []):
            per: dict[str, list[float]] = {label: [] for label, _, _ in variants}
            digests: set[str] = set()
            for i in range(args.repeat):
                for label, tree, form in variants:
                    name = f"fabricmon_bench_large_{os.getpid()}"
                    url = (_pg_database(args.pg, name, create=True) if db == "postgresql"
                           else f"sqlite:///{tmp}/large{i}{label}.sqlite3")
                    try:
                        res = _one(tree, url, args.phases, form)
                    finally:
                        if db == "postgresql":
                            _pg_database(args.pg, name, create=False)
                    us = (res["cpu_s"] + res["db_cpu_s"]) / res["stored"] * 1e6
                    per[label].append(us)
                    digests.add(res["matrices"])
                    print(f"  {db} {label:>5} run {i + 1}: {us:,.0f} µs an event "
                          f"(CPU {res['cpu_s']:.2f} s, of which ingest {res['ingest_cpu_s']:.2f} s; "
                          f"backend {res['db_cpu_s']:.2f} s; "
                          f"{res['body_mb']:.0f} MB of NDJSON; wall {res['wall_s']:.1f} s); "
                          f"load {os.getloadavg()[0]:.1f}")
            assert len(digests) == 1, f"the runs stored different matrices: {digests}"
            for label, values in per.items():
                values.sort()
                figures[f"{db}_{label}"] = values[len(values) // 2]
            line = ", ".join(f"{label} {figures[f'{db}_{label}']:,.0f}" for label in per)
            print(f"  {db}: median µs an event: {line}; every run's matrices equal")
            if args.against:
                figures[f"{db}_ratio"] = figures[f"{db}_prev"] / figures[f"{db}_lists"]
                print(f"  {db}: lists {figures[f'{db}_ratio']:.1f}x cheaper an event than the {args.against} "
                      f"path with maps; one step's block ({PHASES_OF_STEP} phases, "
                      f"{PHASES_OF_STEP * GROUP * GROUPS:,} events) "
                      f"{figures[f'{db}_lists'] * PHASES_OF_STEP * GROUP * GROUPS / 1e6:.0f} CPU s "
                      f"against {figures[f'{db}_prev'] * PHASES_OF_STEP * GROUP * GROUPS / 1e6:.0f}")

    def fig(key: str, fmt: str = ".0f") -> str:
        return format(figures[key], fmt) if key in figures else "n/a"

    block = PHASES_OF_STEP * GROUP * GROUPS / 1e6
    print(f"BENCH ingest_large ranks={GROUP * GROUPS} peers={GROUP} events={events} "
          f"sqlite_us_per_event_lists={fig('sqlite_lists')} sqlite_us_per_event_maps={fig('sqlite_maps')} "
          f"sqlite_us_per_event_prev={fig('sqlite_prev')} sqlite_vs_prev={fig('sqlite_ratio', '.1f')}x "
          f"pg_us_per_event_lists={fig('postgresql_lists')} pg_us_per_event_maps={fig('postgresql_maps')} "
          f"pg_us_per_event_prev={fig('postgresql_prev')} pg_vs_prev={fig('postgresql_ratio', '.1f')}x "
          f"block_cpu_s_sqlite={figures.get('sqlite_lists', float('nan')) * block:.0f} "
          f"block_cpu_s_sqlite_prev={figures.get('sqlite_prev', float('nan')) * block:.0f} "
          f"load={os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
