"""The history sink against a really busy SQLite file: another connection holds the one write lock
past the sink's busy timeout, the sink's first tries fail with "database is locked", and once the
lock is released the minute's history row arrives — no warning, no traceback, nothing lost.

(``test_history_sink`` checks the retry policy on a stubbed writer; this is the same path with a
real database, a real Redis live window and a real lock holder in this process.)
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOLD_S = 2.5  # the lock holder's time: longer than the sink's busy timeout and its first pause

pytestmark = pytest.mark.integration

_SETUP = """
import django
django.setup()
from fabricmon.topology.models.fabric import Fabric
Fabric.objects.create(name="hist-busy", topology_version="v1")
"""

# The sink in its own process, as in a collector: a 0.3 s busy timeout and short pauses stand in
# for the 20 s timeout and 5/15/30 s pauses. Prints each try's outcome and, at the end, the rows.
_SINK = """
import sys, time, logging, django
from django.conf import settings
settings.DATABASES["default"]["OPTIONS"]["timeout"] = 0.3
django.setup()
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
import numpy as np
from fabricmon.base.connections import connect
from fabricmon.core.telemetry.frames import Frame
from fabricmon.telemetry import live_window, services
from fabricmon.telemetry.models import HistoryFrame

redis_url = sys.argv[1]
r = connect(redis_url)
live_window.forget(r, "hist-busy")
t0 = (time.time_ns() // 10**9 - 120) * 10**9  # the last two minutes: frames are appended after their time
for i in range(1, 61):
    util = np.full(8, 0.1, dtype=np.float32)
    util[3] = 0.9  # one hot port: the row must carry it
    live_window.append(r, Frame("hist-busy", "v1", t0 + i * 10**9, 1.0, {"util": util, "in_bps": util * 1e9}),
                       max_frames=600)
services.HISTORY_RETRY_PAUSES_S = (0.5, 1.0, 2.0, 4.0)
write = services.write_history
def traced(*a, **kw):
    try:
        n = write(*a, **kw)
    except Exception as exc:
        print("try failed:", exc, flush=True)
        raise
    print("try wrote", n, flush=True)
    return n
services.write_history = traced
print("ready", flush=True)
sys.stdin.readline()  # the test holds the lock now
services._history_sink(redis_url)(type("F", (), {"fabric": "hist-busy", "max_frames": 600})(), t0, t0 + 60 * 10**9)
rows = list(HistoryFrame.objects.filter(fabric__name="hist-busy").values_list("n_samples", flat=True))
print("rows", rows, flush=True)
live_window.forget(r, "hist-busy")
"""


def test_a_history_row_waits_out_a_held_write_lock_and_arrives(tmp_path: Path, redis_url: str) -> None:
    db = tmp_path / "db.sqlite3"
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{db}", "DJANGO_SETTINGS_MODULE": "fabricmon.settings",
           "REDIS_URL": redis_url}
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True)
    subprocess.run([sys.executable, "-c", _SETUP], cwd=ROOT, env=env, check=True)
    sink = subprocess.Popen([sys.executable, "-c", _SINK, redis_url], cwd=ROOT, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert sink.stdin is not None and sink.stdout is not None
    assert sink.stdout.readline().strip() == "ready"
    holder = sqlite3.connect(db, timeout=5.0, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the one write lock, as a long ingest or prune chunk holds it
    sink.stdin.write("go\n")
    sink.stdin.flush()
    time.sleep(HOLD_S)
    holder.execute("COMMIT")
    out, err = sink.communicate(timeout=60)
    lines = out.splitlines()
    failed = [line for line in lines if line.startswith("try failed")]
    assert sink.returncode == 0, err
    assert failed and all("database is locked" in line for line in failed), out  # it did meet the lock
    assert lines[-2] == "try wrote 1", out  # … and got in once the lock was free
    assert lines[-1] == "rows [60]", out  # the minute's one row, from all 60 frames
    assert "Traceback" not in err and "not written" not in err, err
