"""Traffic matrices of many ranks are merged and encoded from their nonzero cells (never an n×n
array: 254 MB at 5,632 ranks, held under SQLite's write lock for seconds a batch). Here the same
batches go into two runs, one through the dense path and one forced through the pairs path, on
SQLite and PostgreSQL in a child process each: every stored matrix, its rank count and its calls
must be equal — through inserts, updates of rows other batches began, rank counts that grow, and
received matrices that differ from sent. The pairs path appends most batches as ``MatrixPart``
rows and folds them in (``matrix_parts``): equal once the run is settled."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration

_SCRIPT = """
import django, orjson
import numpy as np
django.setup()
from django.contrib.auth import get_user_model
from django.core.management import call_command
call_command("migrate", verbosity=0)
from fabricmon.jobs import ingest, matrices, matrix_parts
from fabricmon.jobs.models import MatrixPart, Run, TrafficMatrix

rng = np.random.default_rng(5)
GROUP = 8
def line(i, rank, step, layer, phase, world):
    g = rank // GROUP * GROUP
    peers = {str(p): int(rng.integers(1, 5000)) for p in range(g, min(g + GROUP, world))}
    recv = dict(peers)
    if i % 7 == 0:
        recv[str(g)] = recv[str(g)] + 1  # received differs from sent
    return orjson.dumps({"id": f"e{i}", "rank": rank, "step": step, "layer": layer, "phase": phase,
                         "start_ns": 10**18 + i, "end_ns": 10**18 + i + 5, "collective": "all_to_all",
                         "send_bytes_per_peer": peers, "recv_bytes_per_peer": recv, "source": "probe"})
batches, i = [], 0
for world in (24, 40):  # the second part adds ranks: stored matrices grow
    for step in range(3):
        for layer in range(2):
            for phase in ("dispatch", "combine"):
                for rank in range(world):
                    batches.append(line(i, rank, step, layer, phase, world))  # same keys: rows grow
                    i += 1
# batches of 37 lines: a (step, layer, phase) spreads over several batches (updates of its row)
bodies = [b"\\n".join(batches[a:a + 37]) for a in range(0, len(batches), 37)]
user = get_user_model().objects.create_user("m")
runs = {}
for name, cells in (("dense", matrices.PAIRS_FROM_CELLS), ("pairs", 0)):
    matrices.PAIRS_FROM_CELLS = cells
    run = runs[name] = Run.objects.create(owner=user, name=name)
    for body in bodies:
        res = ingest.ingest_ndjson(run, body)
        assert not res.rejected, res.rejected
parts = MatrixPart.objects.filter(run=runs["pairs"]).count()
assert parts > 0 and not MatrixPart.objects.filter(run=runs["dense"]).exists(), parts
folded = matrix_parts.settle(runs["pairs"])
assert folded == parts and not MatrixPart.objects.exists(), (folded, parts)
assert matrix_parts.settle(runs["pairs"]) == 0
def rows(run):
    return {(m.source, m.step, m.layer, m.phase): m for m in TrafficMatrix.objects.filter(run=run)}
a, b = rows(runs["dense"]), rows(runs["pairs"])
assert a.keys() == b.keys() and len(a) == 12, (len(a), len(b))
for k in a:
    assert (a[k].n_ranks, a[k].calls) == (b[k].n_ranks, b[k].calls), k
    assert np.array_equal(a[k].sent_array(), b[k].sent_array()), k
    assert np.array_equal(a[k].received_array(), b[k].received_array()), k
    assert bytes(a[k].sent) == bytes(b[k].sent) and bytes(a[k].received) == bytes(b[k].received), k
print("equal", len(a), max(m.n_ranks for m in a.values()), "parts", parts)
"""


def test_the_pairs_path_stores_what_the_dense_path_stores(database_url: str) -> None:
    env = {**os.environ, "DATABASE_URL": database_url, "DJANGO_SETTINGS_MODULE": "fabricmon.settings"}
    out = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    words = out.stdout.split()
    assert words[:3] == ["equal", "12", "40"] and words[3] == "parts" and int(words[4]) > 0, out.stdout


def test_a_job_whose_ranks_post_alone_rewrites_its_matrix_a_logarithmic_number_of_times(db) -> None:  # type: ignore[no-untyped-def]
    """One event a batch, as a job whose ranks each post their own events: every batch appends a
    part, a fold happens when the parts would reach FOLD_RATIO x the row, so the row is rewritten
    O(log) times and the parts never outgrow it; a reader's settle leaves the exact matrix."""
    import json

    import numpy as np
    from django.contrib.auth import get_user_model

    from fabricmon.jobs import ingest, matrix_parts
    from fabricmon.jobs.models import MatrixPart, Run, TrafficMatrix

    world = 2100  # above 2,048 ranks: the pairs path
    run = Run.objects.create(owner=get_user_model().objects.create_user("solo"), name="solo", world_size=world)
    group = list(range(0, world, 7))  # 300 ranks, spread over the job
    rng = np.random.default_rng(3)
    sent = {}
    folds, parts_before = 0, 0
    for i, rank in enumerate(group):
        row = rng.integers(1, 1000, size=len(group)).tolist()
        sent[rank] = row
        line = json.dumps({"id": f"s{rank}", "rank": rank, "step": 0, "layer": 0, "phase": "dispatch",
                           "start_ns": 10**18 + i, "end_ns": 10**18 + i + 5, "pg_ranks": group,
                           "send_bytes_per_pg_rank": row, "source": "probe"}).encode()
        assert ingest.ingest_ndjson(run, line).stored == 1
        parts = MatrixPart.objects.filter(run=run).count()
        folds += parts < parts_before + 1  # a fold took the parts (and this batch's) into the row
        parts_before = parts
        m = TrafficMatrix.objects.get(run=run)
        staged = sum(len(p.sent) + len(p.received) for p in MatrixPart.objects.filter(run=run))
        assert staged < matrix_parts.FOLD_RATIO * (len(m.sent) + len(m.received)), (i, staged)
    assert 2 <= folds <= 8, folds  # log4(300) ≈ 4 (the first batch inserts the row)
    assert matrix_parts.settle(run) == parts_before and not MatrixPart.objects.exists()
    m = TrafficMatrix.objects.get(run=run)
    want = np.zeros((world, world), dtype=np.int64)
    for rank, row in sent.items():
        want[rank, group] = row
    n = group[-1] + 1  # (a matrix is as wide as the highest rank it holds)
    assert m.calls == len(group) and m.n_ranks == n and np.array_equal(m.sent_array(), want[:n, :n])
