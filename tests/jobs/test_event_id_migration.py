"""Migration 0016 moves a run's idempotency keys from one ``EventKey`` row per event to 64-id
``EventIdSet`` rows, filled from the ids the stored blocks hold: after it, a re-post of stored
events is all duplicates and a new id is stored; going back rebuilds ``EventKey`` from the
blocks. Each database runs the script in a child process on a database of its own (migrating
backwards would break the shared test database)."""

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


def _run(database_url: str) -> dict:
    env = {**os.environ, "DATABASE_URL": database_url, "DJANGO_SETTINGS_MODULE": "fabricmon.settings",
           "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=ROOT, env=env, check=True,
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
