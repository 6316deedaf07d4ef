"""Idempotency across processes: several writer processes post overlapping batches of one run
into the same database at once — an SQLite file (the default database) and PostgreSQL; every
event id is stored exactly once, whatever the interleaving (SQLite: ``BEGIN IMMEDIATE`` writers;
PostgreSQL: concurrent ``ON CONFLICT DO UPDATE`` claims of shared 64-id rows), and the traffic
matrices hold each stored event's bytes exactly once, on the dense path and on the many-rank
path that appends parts and folds them (PostgreSQL: read-modify-write of a row under the run's
advisory lock; without it two writers' updates of one row lost one of them)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_795_987_668_367_402_543

pytestmark = pytest.mark.integration

_WRITER = """
import json, sys, django
django.setup()
from fabricmon.jobs import blocks, ingest, matrices
from fabricmon.jobs.models import Run
if sys.argv[1] == "pairs":
    matrices.PAIRS_FROM_CELLS = 0  # every matrix through matrix_parts
ingest.SINGLE_ID_INSERT_ROWS = 5  # PostgreSQL: the plain-INSERT claim of one-id rows races too
run = Run.objects.get(name="shared")
print("ready", flush=True)
stored = duplicates = 0
for body in json.load(sys.stdin):
    res = ingest.ingest_ndjson(run, body.encode())
    assert not res.rejected, res.rejected
    stored, duplicates = stored + res.stored, duplicates + res.duplicates
print(json.dumps([stored, duplicates]))
"""

_SETUP = """
import django
django.setup()
from django.contrib.auth import get_user_model
from fabricmon.jobs.models import Run
Run.objects.create(owner=get_user_model().objects.create_user("w"), name="shared")
"""

_READ = """
import json, django
django.setup()
from fabricmon.jobs import blocks, ingest, matrix_parts
from fabricmon.jobs.models import Run, TrafficMatrix
run = Run.objects.get(name="shared")
matrix_parts.settle(run)
cells = {}
for m in TrafficMatrix.objects.filter(run=run):
    sent = m.sent_array()
    for (src, dst) in zip(*sent.nonzero()):
        cells[f"{m.step} {src} {dst}"] = int(sent[src, dst])
print(json.dumps({"ids": blocks.event_ids(run), "count": blocks.event_count(run), "cells": cells}))
"""


def _batch(ids: list[int], whole_only: bool = False, own: str = "") -> str:
    return "\n".join(
        json.dumps(
            {
                # numbered ids share 64-id rows; others don't (a batch of only those: a plain INSERT);
                # ``own``: ids no other writer posts, so no claim row orders this writer's batch
                # after another's that touches the same matrices
                "id": f"{own}{i}" if own else f"c{i}" if i % 3 and not whole_only else f"u{i}x",
                "rank": i % 4,
                "step": i // 16,
                "phase": "dispatch",
                "start_ns": T0 + i,
                "end_ns": T0 + i + 1,
                "send_bytes_per_peer": {"0": i, "1": 1},
            }
        )
        for i in ids
    )


@pytest.mark.parametrize("path", ["dense", "pairs"])
def test_writer_processes_store_each_id_once(database_url: str, path: str) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "DJANGO_SETTINGS_MODULE": "fabricmon.settings",
    }
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True
    )
    subprocess.run([sys.executable, "-c", _SETUP], cwd=ROOT, env=env, check=True)
    # 4 writers, 30 batches each of 50 ids drawn from 0..299 with overlaps within and between
    # writers (a batch also repeats ids inside itself); every third batch's ids are all
    # un-numbered, so its plain-INSERT claim races the other writers' upserts of the same rows
    plans = []
    for w in range(4):
        batches = []
        for b in range(30):
            start = (w * 37 + b * 23) % 250
            ids = list(range(start, start + 40)) + list(range(start, start + 10))
            batches.append(_batch(ids, whole_only=b % 3 == 2))
            batches.append(_batch(list(range(b * 8, b * 8 + 40)), own=f"w{w}d"))
        plans.append(batches)
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, path],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in plans
    ]
    for proc in writers:  # all set up before any posts: the posts overlap
        assert proc.stdout.readline().strip() == "ready"
    for proc, plan in zip(writers, plans, strict=True):
        proc.stdin.write(json.dumps(plan))
        proc.stdin.close()
    results = []
    for proc in writers:
        assert proc.wait(timeout=120) == 0
        results.append(json.loads(proc.stdout.read()))
    expected = {json.loads(line)["id"] for plan in plans for body in plan for line in body.splitlines()}
    stored = sum(r[0] for r in results)
    assert stored == len(expected)
    assert sum(r[0] + r[1] for r in results) == 4 * 30 * 90  # every line counted once: stored or duplicate
    read = subprocess.run(
        [sys.executable, "-c", _READ], cwd=ROOT, env=env, check=True, capture_output=True, text=True
    )
    got = json.loads(read.stdout)
    assert got["count"] == len(expected)
    assert sorted(got["ids"]) == sorted(expected)  # each id exactly once
    want: dict[str, int] = {}
    for i in (int(re.search(r"(\d+)x?$", e)[1]) for e in expected):  # c7, u7x, w2d7: each its own event
        for peer, nbytes in ((0, i), (1, 1)):
            if nbytes:
                key = f"{i // 16} {i % 4} {peer}"
                want[key] = want.get(key, 0) + nbytes
    assert got["cells"] == want
