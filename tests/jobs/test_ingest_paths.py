"""The columnar fast path and the careful validator store the same thing, on SQLite and on
PostgreSQL: a mixed batch of good and bad lines (every peer-map shape of test_event_blocks, the
rejections of its MIXED batch, its per-pg-rank LISTS, plain lines in both JSON spacings) is posted through
``ingest_ndjson`` into one run and validated line by line into another; both runs must hold equal
event columns and matrices, both must reject the same lines with the same field and reason, and a
re-post must store nothing. Each database runs the same script in a child process (its own
``DATABASE_URL``), so PostgreSQL's own statements (binary arrays, the block and its keys in one
statement, the claim's count) are exercised for real."""

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
import json, django, orjson
django.setup()
from django.contrib.auth import get_user_model
from django.core.management import call_command
call_command("migrate", verbosity=0)
from fabricmon.jobs import blocks, ingest
from fabricmon.jobs.columns import EXPORT_FIELDS
from fabricmon.jobs.models import Run, TrafficMatrix
from fabricmon.jobs.validation import LineError, ParsedBatch, _FieldError, validate_event
from tests.jobs.test_event_blocks import LISTS, MIXED, PEER_MAPS, _event, _line, _list_line

plain = [json.dumps(_event(100 + i)).encode() for i in range(40)]
plain += [json.dumps(_event(200 + i), separators=(",", ":")).encode() for i in range(40)]
odd = [_line(300 + i, t, PEER_MAPS[-1 - i]) for i, t in enumerate(PEER_MAPS)]
mixed = [json.dumps(e).encode() for e in MIXED] + [b'{"rank": 1', b"", b"[1, 2]"]
lists = [_list_line(400 + i, t, LISTS[-1 - i][0], pg=g) for i, (t, g) in enumerate(LISTS)]
body = b"\\n".join(plain[:30] + odd[:10] + lists[:12] + mixed + odd[10:] + plain[30:] + lists[12:])

owner = get_user_model().objects.create_user("paths")
fast_run = Run.objects.create(owner=owner, name="fast")
careful_run = Run.objects.create(owner=owner, name="careful")

fast = ingest.ingest_ndjson(fast_run, body)
again = ingest.ingest_ndjson(fast_run, body)
rows, peers, errors = [], [], []
for n, raw in enumerate(body.split(b"\\n"), start=1):
    if not raw.strip():
        continue
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        errors.append(LineError(n, "", f"invalid JSON: {exc}"))
        continue
    try:
        rows.append(validate_event(obj, 0, ingest.rank_limit(careful_run)))
    except _FieldError as bad:
        errors.append(LineError(n, bad.field, bad.reason))
        continue
    peers.append((obj.get("send_bytes_per_peer"), obj.get("recv_bytes_per_peer")))
careful = ingest.store_batch(careful_run, ParsedBatch(rows, peers, errors, n))

def stored(run):
    events = sorted(blocks.iter_events(run), key=lambda e: e["event_id"])
    matrices = sorted(
        [m.source, m.step, m.layer, m.phase, m.n_ranks, m.calls, m.sent_array().tolist(),
         m.received_array().tolist()]
        for m in TrafficMatrix.objects.filter(run=run)
    )
    index = {  # what the block key index (EventBlockKey rows) answers
        "probe": blocks.event_count(run, source="probe"), "steps": blocks.newest_steps(run, 100),
        "combine": len(blocks.event_columns(run, phase="combine")), "span": blocks.step_span(run),
    }
    return {"events": events, "matrices": matrices, "count": blocks.event_count(run), "index": index}

print(json.dumps({
    "fast": fast.as_dict(), "again": again.as_dict(), "careful": careful.as_dict(),
    "fast_stored": stored(fast_run), "careful_stored": stored(careful_run),
}))
"""


def _run(database_url: str) -> dict:
    env = {**os.environ, "DATABASE_URL": database_url, "DJANGO_SETTINGS_MODULE": "fabricmon.settings",
           "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _check(got: dict) -> None:
    fast, careful = got["fast"], got["careful"]
    assert fast["rejected"] == careful["rejected"]  # same lines, fields and reasons
    assert fast["rejected_count"] >= 20 and fast["stored"] >= 90  # (the batch really is mixed)
    assert (fast["lines"], fast["stored"]) == (careful["lines"], careful["stored"])
    assert got["fast_stored"] == got["careful_stored"]
    assert got["fast_stored"]["count"] == fast["stored"]
    index = got["fast_stored"]["index"]
    assert index["probe"] == fast["stored"] and index["combine"] > 0 and len(index["steps"]) > 3
    again = got["again"]
    assert (again["stored"], again["duplicates"]) == (0, fast["stored"])
    assert again["rejected"] == fast["rejected"]


def test_fast_and_careful_paths_store_the_same_on_sqlite(tmp_path: Path) -> None:
    _check(_run(f"sqlite:///{tmp_path / 'db.sqlite3'}"))


def test_fast_and_careful_paths_store_the_same_on_postgresql(
    tmp_path: Path,
    pg_database_url: str,  # noqa: F811  (fixture)
) -> None:
    on_pg = _run(pg_database_url)
    _check(on_pg)
    assert on_pg == _run(f"sqlite:///{tmp_path / 'db.sqlite3'}")  # and both databases agree
