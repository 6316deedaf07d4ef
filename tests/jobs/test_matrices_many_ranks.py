"""Traffic matrices of many ranks are merged and encoded from their nonzero cells (never an n×n
array: 254 MB at 5,632 ranks, held under SQLite's write lock for seconds a batch). Here the same
batches go into two runs, one through the dense path and one forced through the pairs path, on
SQLite and PostgreSQL in a child process each: every stored matrix, its rank count and its calls
must be equal — through inserts, updates of rows other batches began, rank counts that grow, and
received matrices that differ from sent."""

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
from fabricmon.jobs import ingest, matrices
from fabricmon.jobs.models import Run, TrafficMatrix

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
def rows(run):
    return {(m.source, m.step, m.layer, m.phase): m for m in TrafficMatrix.objects.filter(run=run)}
a, b = rows(runs["dense"]), rows(runs["pairs"])
assert a.keys() == b.keys() and len(a) == 12, (len(a), len(b))
for k in a:
    assert (a[k].n_ranks, a[k].calls) == (b[k].n_ranks, b[k].calls), k
    assert np.array_equal(a[k].sent_array(), b[k].sent_array()), k
    assert np.array_equal(a[k].received_array(), b[k].received_array()), k
    assert bytes(a[k].sent) == bytes(b[k].sent) and bytes(a[k].received) == bytes(b[k].received), k
print("equal", len(a), max(m.n_ranks for m in a.values()))
"""


def test_the_pairs_path_stores_what_the_dense_path_stores(database_url: str) -> None:
    env = {**os.environ, "DATABASE_URL": database_url, "DJANGO_SETTINGS_MODULE": "fabricmon.settings"}
    out = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["equal", "12", "40"], out.stdout
