"""Job owners' pages: create a run, see only your own, upload a rank map, read the timeline and
the per-(layer, phase) matrix JSON that the plotly views draw."""

from __future__ import annotations

import io
import json

import numpy as np
from django.contrib.auth import get_user_model
from django.test import Client

from collectors.probe import events_from_matrix
from collectors.traces.schema import PHASES
from fabricmon.jobs import ingest
from fabricmon.jobs.models import Run

T0 = 1_795_987_668_367_402_543


def test_owner_pages(db) -> None:
    users = get_user_model()
    alice = users.objects.create_user("alice", password="pw-alice-123")
    bob = users.objects.create_user("bob", password="pw-bob-123")
    client = Client()
    assert client.get("/jobs/").status_code == 302  # login required
    client.force_login(alice)
    resp = client.post("/jobs/", {"name": "mixtral-8x7b", "tags": "ep=8, model=mixtral"})
    run = Run.objects.get(name="mixtral-8x7b")
    assert resp.status_code == 302 and run.tags == ["ep=8", "model=mixtral"]
    lines = [
        json.dumps(
            {
                "id": f"e{r}",
                "rank": r,
                "step": 0,
                "layer": 2,
                "phase": "combine",
                "start_ns": T0 + r,
                "end_ns": T0 + r + 5,
                "source": "probe",
                "send_bytes_per_peer": {str(d): 10 * r + d for d in range(2)},
            }
        ).encode()
        for r in range(2)
    ]
    ingest.ingest_ndjson(run, b"\n".join(lines))
    page = client.get(f"/jobs/runs/{run.pk}/")
    assert page.status_code == 200 and b"probe|2|combine" in page.content
    timeline = client.get(f"/jobs/runs/{run.pk}/timeline.json").json()
    assert timeline["events"] == 2 and timeline["exact"]["rank"] == [0, 1]
    assert {PHASES[c] for c in timeline["exact"]["phase"]} == {"combine"}
    matrix = client.get(f"/jobs/runs/{run.pk}/matrix.json?source=probe&layer=2&phase=combine").json()
    assert matrix["sent"] == [[0, 1], [10, 11]]
    rank_map = io.BytesIO(
        json.dumps([{"rank": 0, "host": "node0", "nic": "mlx5_0", "switch_port": "leaf0:Ethernet1"}]).encode()
    )
    rank_map.name = "ranks.json"
    resp = client.post(f"/jobs/runs/{run.pk}/upload", {"kind": "rankmap", "file": rank_map})
    assert resp.status_code == 200 and resp.json()["stored"] == 1
    assert b"leaf0:Ethernet1" in client.get(f"/jobs/runs/{run.pk}/").content
    client.post(f"/jobs/runs/{run.pk}/", {"tags": "a, b"})
    run.refresh_from_db()
    assert run.tags == ["a", "b"]
    client.force_login(bob)
    assert client.get(f"/jobs/runs/{run.pk}/").status_code == 404
    assert b"mixtral" not in client.get("/jobs/").content
    client.post("/jobs/tokens/new", {"name": "ci"})
    page = client.get("/jobs/").content.decode()
    assert "fmj_" in page and "shown once" in page
    assert "shown once" not in client.get("/jobs/").content.decode()


def test_a_matrix_reported_as_events_is_stored_exactly(db) -> None:
    """The twin's path: a whole N x N phase matrix → per-rank events → the same stored matrix."""
    run = Run.objects.create(owner=get_user_model().objects.create_user("twin"), name="twin-moe")
    m = np.arange(16, dtype=float).reshape(4, 4) * 1024.5
    events = list(
        events_from_matrix(m, step=5, layer=3, phase="dispatch", start_ns=T0, end_ns=T0 + 10, id_prefix="tw")
    )
    result = ingest.ingest_events(run, events)
    assert (result.stored, result.rejected) == (4, [])
    stored = run.matrices.get(step=5, layer=3, phase="dispatch", source="twin")
    expected = np.round(m).astype(np.int64)
    assert (stored.sent_array() == expected).all() and (stored.received_array() == expected).all()
