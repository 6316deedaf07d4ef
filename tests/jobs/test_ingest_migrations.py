"""The ingest path's migrations, both ways, on data: 0016 moves a run's idempotency keys from one
``EventKey`` row per event to 64-id ``EventIdSet`` rows, filled from the ids the stored blocks
hold (after it, a re-post of stored events is all duplicates and a new id is stored; going back
rebuilds ``EventKey`` from the blocks); 0017 rebuilds the block index (``EventBlockKey``) from
the blocks, one row per (source, step) and back. Each database runs the scripts in a child
process on a database of its own (migrating backwards would break the shared test database)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.jobs.pg_database import pg_database_url  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration

_SCRIPT = """
import json, django
django.setup()
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from django.utils import timezone
from fabricmon.jobs.columns import encode_block, id_hashes
from tests.jobs.test_event_blocks import _event

call_command("migrate", verbosity=0)
call_command("migrate", "jobs", "0015", verbosity=0)
from fabricmon.jobs.validation import validate_dicts
from fabricmon.jobs.columns import columns_from_rows
owner = get_user_model().objects.create_user("mig")
runs = {}
ids = {"r": [f"x{i}" for i in range(150)] + ["u-a", "x01"], "o": [f"x{i}" for i in range(10)]}
with connection.cursor() as cursor:
    for name, run_ids in ids.items():
        cursor.execute("INSERT INTO jobs_run (name, owner_id, tags, state, fabric, started_at, stored_bytes, "
                       "pruned_note, probe_dropped) VALUES (%s, %s, '[]', 'running', '', %s, 0, '', '{}')",
                       [name, owner.pk, timezone.now()])
        cursor.execute("SELECT max(id) FROM jobs_run")
        runs[name] = run_id = cursor.fetchone()[0]
        for part in (run_ids[:100], run_ids[100:]):  # two blocks, as 0015's ingest stored them
            batch = validate_dicts([_event(0) | {"id": i} for i in part])
            core, peers = encode_block(columns_from_rows(batch.rows, batch.peers))
            cursor.execute("INSERT INTO jobs_eventblock (run_id, n_events, start_ns_min, start_ns_max, columns, "
                           "peers, created_at) VALUES (%s, %s, 0, 0, %s, %s, %s)",
                           [run_id, len(part), core, peers, timezone.now()])
            for h in id_hashes(part).tolist():
                cursor.execute("INSERT INTO jobs_eventkey (run_id, id_hash) VALUES (%s, %s)", [run_id, h])
call_command("migrate", "jobs", verbosity=0)
from fabricmon.jobs import ingest
from fabricmon.jobs.models import EventIdSet, Run

def post(name, run_ids):
    body = "\\n".join(json.dumps(_event(0) | {"id": i}) for i in run_ids).encode()
    res = ingest.ingest_ndjson(Run.objects.get(pk=runs[name]), body)
    return [res.stored, res.duplicates]

out = {"rows": EventIdSet.objects.filter(run_id=runs["r"]).count(),
       "repost": post("r", ids["r"]), "new": post("r", ["x150", "x1", "u-b"]), "other": post("o", ids["r"][:12])}
call_command("migrate", "jobs", "0015", verbosity=0)
with connection.cursor() as cursor:
    cursor.execute("SELECT id_hash FROM jobs_eventkey WHERE run_id = %s", [runs["r"]])
    back = sorted(r[0] for r in cursor.fetchall())
want = sorted(id_hashes(ids["r"] + ["x150", "u-b"]).tolist())
out["back"] = back == want
call_command("migrate", "jobs", verbosity=0)
out["forward_again"] = post("r", ["x150", "u-b", "x151"])
print(json.dumps(out))
"""


_BLOCK_KEYS = """
import json, django
django.setup()
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from fabricmon.jobs import blocks, ingest
from fabricmon.jobs.models import Run
from tests.jobs.test_event_blocks import _event

call_command("migrate", verbosity=0)
run = Run.objects.create(owner=get_user_model().objects.create_user("bk"), name="bk")
events = [_event(i) | {"layer": i % 3, "phase": ("dispatch", "combine")[i % 2]} for i in range(60)]
events += [_event(60) | {"step": None, "layer": None}]
for part in (events[:25], events[25:]):
    ingest.ingest_ndjson(run, "\\n".join(json.dumps(e) for e in part).encode())

def answers():
    cols = lambda **f: sorted(blocks.event_columns(run, **f).event_id)
    return {"step3": cols(step=3), "layer1": cols(layer=1), "combine": cols(phase="combine"),
            "s4l2d": cols(step=4, layer=2, phase="dispatch"), "none": cols(step=-1, layer=-1),
            "steps": blocks.newest_steps(run, 50), "span": blocks.step_span(run),
            "probe": blocks.event_count(run, source="probe"), "ids": sorted(blocks.block_ids(run, min_step=9)),
            "block_steps": sorted(blocks.block_steps(run))[0][:2]}

now = answers()
with connection.cursor() as cursor:
    cursor.execute("SELECT count(*) FROM jobs_eventblockkey")
    rows_now = cursor.fetchone()[0]
call_command("migrate", "jobs", "0016", verbosity=0)
with connection.cursor() as cursor:
    cursor.execute("SELECT source, step, layer, phase, events FROM jobs_eventblockkey ORDER BY 1, 2, 3, 4")
    old_rows = cursor.fetchall()
call_command("migrate", "jobs", verbosity=0)
print(json.dumps({"same": now == answers(), "now": now, "rows_now": rows_now, "old_rows": len(old_rows),
                  "old_events": sum(r[4] for r in old_rows), "old_first": list(old_rows[0])}))
"""


def _run(database_url: str, script: str = _SCRIPT) -> dict:
    env = {**os.environ, "DATABASE_URL": database_url, "DJANGO_SETTINGS_MODULE": "fabricmon.settings",
           "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _check(got: dict) -> None:
    assert got["rows"] == 3 + 2  # x0…x149: 3 blocks of 64 numbers; "u-a" and "x01": a row each
    assert got["repost"] == [0, 152]
    assert got["new"] == [2, 1]  # x150, u-b new; x1 stored before the migration
    assert got["other"] == [2, 10]  # the other run held x0…x9 only
    assert got["back"] is True
    assert got["forward_again"] == [1, 2]


def test_keys_move_to_id_sets_and_back_on_sqlite(tmp_path: Path) -> None:
    _check(_run(f"sqlite:///{tmp_path / 'db.sqlite3'}"))


def test_keys_move_to_id_sets_and_back_on_postgresql(pg_database_url: str) -> None:  # noqa: F811
    _check(_run(pg_database_url))


def _check_block_keys(got: dict) -> None:
    now = got["now"]
    assert got["same"] is True  # rebuilt to the old layout and back: the same answers
    assert now["step3"] == sorted(f"x{i}" for i in range(18, 24))
    assert now["layer1"] == sorted(f"x{i}" for i in range(1, 60, 3))
    assert now["combine"] == sorted([f"x{i}" for i in range(1, 60, 2)] + ["x60"])  # (x60: _event's phase)
    assert now["s4l2d"] == ["x26"] and now["none"] == ["x60"]
    assert now["steps"] == list(range(9, -1, -1)) and now["span"] == [0, 9] and now["probe"] == 61
    assert got["rows_now"] == 12  # a row per (source, step) of each block: steps 0-4, 4-9 and the stepless event
    assert got["old_rows"] > got["rows_now"] and got["old_events"] == 61


def test_block_keys_per_step_and_back_on_sqlite(tmp_path: Path) -> None:
    _check_block_keys(_run(f"sqlite:///{tmp_path / 'db.sqlite3'}", _BLOCK_KEYS))


def test_block_keys_per_step_and_back_on_postgresql(pg_database_url: str) -> None:  # noqa: F811
    _check_block_keys(_run(pg_database_url, _BLOCK_KEYS))
