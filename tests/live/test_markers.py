"""Phase markers for the live heatmap's time axis, through the Django test client: the run selector's
list and one run's markers with its clock alignment and gate. Events go in through the ingest verb
(the probe's exchanged offset as ``clock_offset_ns``); real Redis is not needed by these two views."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.utils import timezone
from phase_events import GAP_MS, phase_ndjson

from fabricmon.jobs.ingest import ingest_ndjson
from fabricmon.jobs.models import Run
from fabricmon.jobs.runs import create_run, end_run
from fabricmon.topology.services import import_fabric
from tests.topologies import two_leaf_one_spine

pytestmark = [pytest.mark.integration, pytest.mark.django_db]
T0_NS = 1_800_000_000_000_000_000
OFFSET_NS = 2_000_000  # what the probe's exchange measured: moves every event onto the server clock


@pytest.fixture
def fabric(fabric_name):
    spec = two_leaf_one_spine(fabric_name, servers=2)
    import_fabric(spec)
    return spec


@pytest.fixture
def operator(client):
    user = User.objects.create_user("op-markers", password="pw-not-secret")
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    client.force_login(user)
    return user


def _run(user, fabric: str, name: str, body: bytes, offset_ns: int = OFFSET_NS) -> Run:
    run = create_run(user, name, fabric=fabric, world_size=4)
    result = ingest_ndjson(run, body, clock_offset_ns=offset_ns)
    assert not result.rejected, result.rejected
    return run


def test_run_selector_lists_active_and_recent_runs_of_this_fabric_only(client, operator, fabric) -> None:
    active = create_run(operator, "active", fabric=fabric.name)
    recent = end_run(create_run(operator, "recent", fabric=fabric.name))
    old = end_run(create_run(operator, "old", fabric=fabric.name))
    day_ago = timezone.now() - timedelta(days=1)
    Run.objects.filter(pk=old.pk).update(started_at=day_ago, ended_at=day_ago)
    create_run(operator, "elsewhere", fabric=f"{fabric.name}-other")
    runs = client.get(f"/fabric/{fabric.name}/runs.json").json()["runs"]
    assert {r["name"] for r in runs} == {"active", "recent"}
    assert {r["id"]: r["state"] for r in runs} == {active.pk: "running", recent.pk: "finished"}


def test_markers_are_median_spans_with_a_passing_clock_gate(client, operator, fabric) -> None:
    run = _run(operator, fabric.name, "aligned", phase_ndjson(T0_NS))
    data = client.get(f"/fabric/{fabric.name}/runs/{run.pk}/markers.json", {"since_ns": 0}).json()
    assert data["verdict"] == "pass" and data["gate"]["name"] == "clock_alignment", data["reason"]
    assert data["clock"]["offset_known"] and data["clock"]["error_bound_ns"] < 1e6
    markers = data["markers"]
    assert len(markers) == 3 * 2 * 2  # steps x layers x (dispatch, combine)
    first = markers[0]
    # ranks enter 0..3 ms apart (median +1.5 ms) and all leave at 40 ms; plus the exchanged offset
    assert first == {
        "step": 0,
        "layer": 0,
        "phase": "dispatch",
        "start_ms": (T0_NS + 1_500_000 + OFFSET_NS) / 1e6,
        "end_ms": (T0_NS + 40_000_000 + OFFSET_NS) / 1e6,
    }
    assert [m["phase"] for m in markers[:4]] == ["dispatch", "combine"] * 2
    assert data["cursor_ns"] == round(markers[-1]["end_ms"] * 1e6)

    # the next poll asks from a later time and gets only the markers ending from then on
    since = T0_NS + OFFSET_NS + 6 * GAP_MS * 1_000_000
    later = client.get(f"/fabric/{fabric.name}/runs/{run.pk}/markers.json", {"since_ns": since}).json()
    assert [(m["step"], m["layer"], m["phase"]) for m in later["markers"]] == [
        (1, 1, "dispatch"),
        (1, 1, "combine"),
        (2, 0, "dispatch"),
        (2, 0, "combine"),
        (2, 1, "dispatch"),
        (2, 1, "combine"),
    ]


def test_a_skewed_host_or_no_offset_flags_the_markers_with_the_reason(client, operator, fabric) -> None:
    skewed = _run(operator, fabric.name, "skewed", phase_ndjson(T0_NS, skew_ns_by_rank={3: 500_000_000}))
    data = client.get(f"/fabric/{fabric.name}/runs/{skewed.pk}/markers.json").json()
    assert data["verdict"] == "withhold" and data["reason"].startswith("clock_alignment: 500 ms >"), data[
        "reason"
    ]
    assert data["clock"]["worst_rank"] == 3 and len(data["markers"]) == 12  # still sent: drawn flagged

    unknown = _run(operator, fabric.name, "no-offset", phase_ndjson(T0_NS), offset_ns=0)
    data = client.get(f"/fabric/{fabric.name}/runs/{unknown.pk}/markers.json").json()
    assert data["verdict"] == "withhold" and "no clock offset was exchanged" in data["reason"]


def test_markers_refuse_bad_input_and_other_fabrics(client, operator, fabric) -> None:
    run = _run(operator, fabric.name, "aligned", phase_ndjson(T0_NS))
    resp = client.get(f"/fabric/{fabric.name}/runs/{run.pk}/markers.json", {"since_ns": "yesterday"})
    assert resp.status_code == 400 and resp.json()["field"] == "since_ns"
    assert client.get(f"/fabric/{fabric.name}-other/runs/{run.pk}/markers.json").status_code == 404
    empty = create_run(operator, "no events", fabric=fabric.name)
    data = client.get(f"/fabric/{fabric.name}/runs/{empty.pk}/markers.json").json()
    assert data["markers"] == [] and data["verdict"] == "withhold" and "no phase events" in data["reason"]
    client.logout()
    assert client.get(f"/fabric/{fabric.name}/runs/{run.pk}/markers.json").status_code == 302
