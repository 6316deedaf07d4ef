"""A budget cut on SQLite leaves the one write lock to other writers between its chunks.

SQLite's busy wait is no queue: a waiting writer polls (every 100 ms at most), and a pruner that
commits one chunk and begins the next at once wins every time. In the hour soak a 20-60 s cut
starved history, alert flushes, deliveries and ingest posts past their 20 s timeout ("database is
locked"). Here a real pruner process cuts a run on an SQLite file, each chunk held 0.3 s as on a
loaded machine, while this process writes with a 1 s busy timeout: every write must get in.
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
CHUNKS = 24
HOLD_S = 0.3

pytestmark = pytest.mark.integration

_SETUP = f"""
import django
django.setup()
from django.contrib.auth import get_user_model
from fabricmon.jobs import runs
from tests.jobs.long_runs import fill_run
run = runs.create_run(get_user_model().objects.create_user("w"), "big", world_size=8)
fill_run(run, 128 * {2 * CHUNKS}, 8, per_block=128, peers=True)  # {2 * CHUNKS} steps of 128 events
"""

_PRUNER = f"""
import time, django
django.setup()
from django.conf import settings
from fabricmon.jobs import retention
from fabricmon.jobs.models import Run
full = retention.usage(Run.objects.get(name="big")).total
settings.FABRICMON_RUN_BUDGET_MB = full / 2.5 / 1e6
retention.CHUNK_BYTES = full // {2 * CHUNKS}  # a step a transaction
delete = retention._delete_blocks
def held(*a, **kw):  # a loaded machine: each chunk holds the write lock a while
    delete(*a, **kw)
    time.sleep({HOLD_S})
retention._delete_blocks = held
print("pruning", flush=True)
report = retention.prune()
print(report.transactions, flush=True)
"""


def test_other_writers_get_the_lock_while_a_budget_cut_runs(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite3"
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{db}", "DJANGO_SETTINGS_MODULE": "fabricmon.settings"}
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True)
    subprocess.run([sys.executable, "-c", _SETUP], cwd=ROOT, env=env, check=True)
    con = sqlite3.connect(db, timeout=1.0, isolation_level=None)
    con.execute("CREATE TABLE probe (x INTEGER)")
    pruner = subprocess.Popen([sys.executable, "-c", _PRUNER], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    assert pruner.stdout is not None and pruner.stdout.readline().strip() == "pruning"
    written, locked = 0, []
    while pruner.poll() is None:
        try:
            con.execute("BEGIN IMMEDIATE")
            con.execute("INSERT INTO probe VALUES (?)", (written,))
            con.execute("COMMIT")
            written += 1
        except sqlite3.OperationalError as exc:
            locked.append(str(exc))
        time.sleep(0.05)
    transactions = int(pruner.stdout.read().split()[-1])
    assert pruner.returncode == 0
    assert transactions >= CHUNKS  # the cut was long: many chunks, each held HOLD_S
    assert locked == [], f"{len(locked)} writes failed ({locked[0]}), {written} got in"
    assert written >= CHUNKS // 2  # writes went on during the cut, not only after it
