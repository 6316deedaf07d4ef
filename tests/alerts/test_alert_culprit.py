"""Attribution of a port alert to the run, rank and (layer, phase) behind the port.

Real database rows (run, rank map, event blocks through the jobs ingest) and the real lifecycle:
a hot host-facing port fires, and the alert names the layer/phase in which the rank on that port
received the most bytes during the alert window."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from django.contrib.auth.models import Group

from fabricmon.alerts import delivery
from fabricmon.alerts.culprit import culprit_of_port, received_by_layer_phase
from fabricmon.alerts.models import Alert, Episode, Receiver
from fabricmon.alerts.transports import Target
from fabricmon.alerts.transports.alertmanager import Transport as Alertmanager
from fabricmon.alerts.transports.slack import Transport as Slack
from fabricmon.jobs import blocks, ingest, runs
from fabricmon.jobs.models import PHASES, Run
from tests.alerts.test_alert_services import T0, flushed, geo, windows  # noqa: F401 (geo is a fixture)

pytestmark = pytest.mark.django_db
T0_NS = int(T0.timestamp() * 1e9)
S = 1_000_000_000


def _port(g, p: int) -> tuple[str, str]:
    idx = g.index
    return idx.switch_names[idx.switch_of[p]], idx.port_names[p]


def _ev(
    i: int, rank: int, layer: int, phase: str, start_ns: int, recv: dict | None = None, send=None
) -> dict:
    return {
        "id": f"e{i}",
        "rank": rank,
        "step": 1,
        "layer": layer,
        "phase": phase,
        "start_ns": start_ns,
        "end_ns": start_ns + S // 10,
        "source": "probe",
        "send_bytes_per_peer": send or {},
        "recv_bytes_per_peer": recv or {},
    }


@pytest.fixture
def run_on_port(geo, django_user_model):  # noqa: F811
    """Rank 5 of run "moe-7b" sits behind the first host-facing port. In the alert window it
    receives 4 MB in layer 3 dispatch, 1 KB in layer 3 combine; before the window, 9 GB in
    layer 7 dispatch (must not count); rank 6 receives 8 GB in layer 2 combine (another rank)."""
    owner = django_user_model.objects.create_user("bob", password="pw")
    run = runs.create_run(owner, "moe-7b", fabric="su1", world_size=8)
    Run.objects.filter(pk=run.pk).update(started_at=T0 - timedelta(hours=1))
    port = int(np.flatnonzero(geo.is_leaf_host)[0])
    switch, name = _port(geo, port)
    stored, errors = runs.store_rank_map(
        run,
        [
            {
                "rank": 5,
                "host": "node003",
                "local_rank": 1,
                "gpu": "1",
                "switch": switch,
                "switch_port": name,
            },
            {
                "rank": 6,
                "host": "node004",
                "local_rank": 0,
                "gpu": "0",
                "switch": "elsewhere",
                "switch_port": "x",
            },
        ],
    )
    assert stored == 2 and not errors
    events = [
        _ev(1, 5, 3, "dispatch", T0_NS + S // 2, recv={"0": 3_000_000, "1": 1_000_000}),
        _ev(2, 5, 3, "combine", T0_NS + S // 2, recv={"0": 1_000}),
        _ev(3, 5, 7, "dispatch", T0_NS - 600 * S, recv={"0": 9_000_000_000}),
        _ev(4, 6, 2, "combine", T0_NS + S // 2, recv={"0": 8_000_000_000}),
    ]
    result = ingest.ingest_events(run, events)
    assert result.stored == 4, result
    return run, port


def test_alert_on_the_ranks_port_names_its_busiest_layer_and_phase(geo, run_on_port) -> None:  # noqa: F811
    _run, port = run_on_port
    Receiver.objects.create(name="ops", kind="slack", url="http://127.0.0.1:9/o")
    windows(geo, [[port]] * 3, fabric="su1", run_name="moe-7b")
    alert = Alert.objects.get(kind="incast", fired_at__isnull=False)
    a = alert.attribution
    assert (a["run_name"], a["rank"], a["layer"], a["phase"]) == ("moe-7b", 5, 3, "dispatch")
    assert a["recv_bytes"] == 4_000_000
    line = "run moe-7b · layer 3 dispatch · rank 5 (node003 gpu1)"
    assert a["line"] == line and alert.attribution_line == line
    assert Episode.objects.get().attribution_line == line
    (note,) = flushed(T0 + timedelta(minutes=1))
    assert [a.attribution for a in note.alerts] == [line]
    slack = Slack(Target("ops", "http://127.0.0.1:9/o"), delivery.policy()).payload(note)
    assert any(line in f["text"] for b in slack["blocks"] for f in b.get("fields", []))
    am = Alertmanager(Target("am", "http://127.0.0.1:9"), delivery.policy()).payload(note)
    assert am[0]["annotations"]["attribution"] == line and "attribution" not in am[0]["labels"]


def test_port_without_a_rank_map_is_unknown(geo, run_on_port) -> None:  # noqa: F811
    other = int(np.flatnonzero(geo.is_leaf_host)[2])
    Receiver.objects.create(name="ops", kind="webhook", url="http://127.0.0.1:9/o")
    windows(geo, [[other]] * 3, fabric="su1")
    alert = Alert.objects.get(kind="incast", fired_at__isnull=False)
    assert alert.attribution["line"] == "unknown" and alert.attribution["run_name"] == ""
    assert [a.attribution for n in flushed(T0 + timedelta(minutes=1)) for a in n.alerts] == ["unknown"]


def test_window_and_fabric_bound_the_attribution(geo, run_on_port) -> None:  # noqa: F811
    run, port = run_on_port
    switch, name = _port(geo, port)
    # before the window only layer 7 dispatch was received
    early = culprit_of_port("su1", switch, name, T0 - timedelta(seconds=601), T0 - timedelta(seconds=599))
    assert (early.layer, early.phase, early.recv_bytes) == (7, "dispatch", 9_000_000_000)
    # same port name on another fabric: no run there
    assert not culprit_of_port("su9", switch, name, T0, T0 + timedelta(seconds=2)).known
    # a run that ended before the window does not own the port any more
    Run.objects.filter(pk=run.pk).update(ended_at=T0 - timedelta(minutes=1))
    assert culprit_of_port("su1", switch, name, T0, T0 + timedelta(seconds=2)).line == "unknown"


def test_an_unnamed_phase_says_why(geo, run_on_port) -> None:  # noqa: F811
    """A known run whose phase cannot be named says why: it reported nothing for that time (a
    sampling job between its blocks), or its events then are other ranks' with nothing sent to it."""
    run, port = run_on_port
    switch, name = _port(geo, port)
    gap = culprit_of_port("su1", switch, name, T0 + timedelta(seconds=100), T0 + timedelta(seconds=102))
    assert (gap.run_name, gap.phase, gap.unnamed) == ("moe-7b", "", "no_events")
    assert gap.line == "run moe-7b · phase unknown (no events reported then) · rank 5 (node003 gpu1)"
    ingest.ingest_events(run, [_ev(30, 0, 2, "combine", T0_NS + 200 * S, send={"3": 10})])  # not to rank 5
    silent = culprit_of_port("su1", switch, name, T0 + timedelta(seconds=199), T0 + timedelta(seconds=201))
    assert (silent.phase, silent.unnamed) == ("", "rank_silent")
    assert "phase unknown (no event of its rank then)" in silent.line
    named = culprit_of_port("su1", switch, name, T0, T0 + timedelta(seconds=2))
    assert named.phase == "dispatch" and named.unnamed == ""


def test_peer_sends_stand_in_when_the_rank_reported_no_receives(run_on_port) -> None:
    run, _ = run_on_port
    ingest.ingest_events(
        run,
        [
            _ev(10, 0, 4, "dispatch_bwd", T0_NS + 5 * S, send={"5": 700, "6": 1}),
            _ev(11, 1, 4, "dispatch_bwd", T0_NS + 5 * S, send={"5": 300}),
            _ev(12, 1, 4, "combine", T0_NS + 5 * S, send={"5": 999}),
        ],
    )
    cols = blocks.event_columns(run)
    layers, phases, nbytes = received_by_layer_phase(cols, 5, T0_NS + 4 * S, T0_NS + 6 * S)
    assert nbytes.tolist() == [1000, 999] and layers.tolist() == [4, 4]
    assert [PHASES[p] for p in phases] == ["dispatch_bwd", "combine"]


def test_only_blocks_near_the_window_are_read(run_on_port) -> None:
    run, _ = run_on_port
    assert ingest.ingest_events(run, [_ev(20, 5, 9, "dispatch", T0_NS - 3600 * S, recv={"0": 5})]).stored == 1
    near = blocks.columns_near(run, T0_NS, T0_NS + 2 * S)
    assert sorted(near.event_id) == ["e1", "e2", "e3", "e4"]  # the fixture's batch, not e20's
    assert blocks.columns_near(run, T0_NS - 3600 * S, T0_NS - 3599 * S).event_id == ["e20"]


def test_list_and_episode_pages_show_the_attribution(geo, run_on_port, client, django_user_model) -> None:  # noqa: F811
    _run, port = run_on_port
    viewer = django_user_model.objects.create_user("ops", password="pw")
    viewer.groups.add(Group.objects.get(name="viewers"))  # reading alerts is a viewer's
    client.force_login(viewer)
    windows(geo, [[port]] * 3, fabric="su1", run_name="moe-7b")
    line = "run moe-7b · layer 3 dispatch · rank 5 (node003 gpu1)"
    assert line in client.get("/alerts/").content.decode()
    assert line in client.get(f"/alerts/episodes/{Episode.objects.get().pk}/").content.decode()


def test_a_firing_alert_names_the_phase_once_the_jobs_events_arrive(geo, run_on_port) -> None:  # noqa: F811
    """A job that reports a sample of its steps (or posts late): the alert fires with the run and
    rank but no phase; within CULPRIT_REFRESH_S of the events for the hot port arriving, the
    alert and its episode name the layer and phase."""
    from fabricmon.alerts.attribution import REFRESH_S as CULPRIT_REFRESH_S

    run, port = run_on_port
    windows(geo, [[port]] * 3, fabric="su1", start=100)  # nothing reported near T0+100 s
    alert = Alert.objects.get(kind="incast", fired_at__isnull=False)
    assert alert.attribution["run_name"] == "moe-7b" and not alert.attribution["phase"]
    assert "phase unknown" in alert.attribution_line
    ingest.ingest_events(run, [_ev(20, 5, 6, "combine", T0_NS + 102 * S, recv={"0": 5_000})])
    late = int(CULPRIT_REFRESH_S) + 3
    windows(geo, [[port]] * late, fabric="su1", start=103)
    alert.refresh_from_db()
    line = "run moe-7b · layer 6 combine · rank 5 (node003 gpu1)"
    assert alert.state == "firing" and alert.attribution["line"] == line
    assert Episode.objects.get().attribution_line == line


def test_a_late_batch_names_the_phase_from_anywhere_in_the_alerts_span(geo, run_on_port) -> None:  # noqa: F811
    """A sampling job reports one block of steps in every k: the only events for the hot port may
    be from the alert's first seconds, and arrive half a minute later. The refresh looks over the
    alert's whole span (bounded by LOOKBACK_S), not only the last few seconds."""
    from fabricmon.alerts.attribution import LOOKBACK_S, REFRESH_S

    run, port = run_on_port
    windows(geo, [[port]] * 40, fabric="su1", start=300)
    alert = Alert.objects.get(kind="incast", fired_at__isnull=False)
    assert alert.state == "firing" and not alert.attribution["phase"]
    ingest.ingest_events(run, [_ev(30, 5, 2, "dispatch", T0_NS + 302 * S, recv={"0": 7_000})])
    assert LOOKBACK_S > 340 - 302
    windows(geo, [[port]] * (int(REFRESH_S) + 2), fabric="su1", start=340)
    alert.refresh_from_db()
    assert (alert.attribution["layer"], alert.attribution["phase"]) == (2, "dispatch")
    assert Episode.objects.get().attribution["phase"] == "dispatch"


def test_a_resolved_alert_is_named_when_its_events_post_after_it_resolved(geo, run_on_port) -> None:  # noqa: F811
    """The hot port cooled before the job's batch arrived: within LATE_S of resolving, the resolved
    alert (and its closed episode) still get the layer and phase; after LATE_S nothing is read."""
    from fabricmon.alerts.attribution import LATE_S, REFRESH_S

    run, port = run_on_port
    windows(geo, [[port]] * 3 + [[]] * 8, fabric="su1", start=500)
    alert = Alert.objects.get(kind="incast", fired_at__isnull=False)
    assert alert.state == "resolved" and not alert.attribution["phase"]
    ingest.ingest_events(run, [_ev(40, 5, 4, "combine_bwd", T0_NS + 501 * S, recv={"0": 9_000})])
    windows(geo, [[]] * (int(REFRESH_S) + 2), fabric="su1", start=511)
    alert.refresh_from_db()
    assert alert.state == "resolved"
    assert (alert.attribution["layer"], alert.attribution["phase"]) == (4, "combine_bwd")
    assert Episode.objects.get().attribution["phase"] == "combine_bwd"
    # long after it resolved, a resolved alert is no longer looked at (bounded work per window)
    windows(geo, [[port]] * 3 + [[]] * 8, fabric="su1", start=700)
    second = Alert.objects.filter(kind="incast", fired_at__isnull=False).order_by("-fired_at")[0]
    ingest.ingest_events(run, [_ev(41, 5, 1, "dispatch", T0_NS + 701 * S, recv={"0": 9_000})])
    windows(geo, [[]] * 4, fabric="su1", start=int(711 + LATE_S))
    second.refresh_from_db()
    assert not second.attribution["phase"]


def test_a_long_alert_whose_job_lags_is_named_from_what_the_job_reported(geo, run_on_port) -> None:  # noqa: F811
    """A firing alert two minutes long whose job's events lag a minute behind: the newest
    LOOKBACK_S of the span has no events yet, the part the job has reported does — the refresh
    reads that part (bounded), not the empty last seconds."""
    from fabricmon.alerts.attribution import LOOKBACK_S, REFRESH_S

    run, port = run_on_port
    windows(geo, [[port]] * 120, fabric="su1", start=900)
    ingest.ingest_events(run, [_ev(50, 5, 3, "combine", T0_NS + 955 * S, recv={"0": 9_000})])
    assert LOOKBACK_S < 1020 - 955  # the job is further behind than the look-back
    windows(geo, [[port]] * (int(REFRESH_S) + 2), fabric="su1", start=1020)
    alert = Alert.objects.get(kind="incast", fired_at__isnull=False)
    assert alert.state == "firing"
    assert (alert.attribution["layer"], alert.attribution["phase"]) == (3, "combine")


def test_a_resolved_alert_that_flaps_pending_again_is_still_named_from_late_events(geo, run_on_port) -> None:  # noqa: F811
    """At 16,896 ports a hot port's condition flaps with the job's bursts: the alert fires,
    resolves, goes pending again for a window and back to inactive — all before the job's events
    for the firing post. Within LATE_S of the resolution its culprit is still looked up, over the
    firing's own span (not the later pending's), and names the phase."""
    from fabricmon.alerts.attribution import REFRESH_S

    run, port = run_on_port
    windows(geo, [[port]] * 3 + [[]] * 8 + [[port]] + [[]], fabric="su1", start=500)
    alert = Alert.objects.get(kind="incast", key=":".join(_port(geo, port)))
    assert alert.state == "inactive" and alert.resolved_at is not None and not alert.attribution["phase"]
    assert alert.active_since > alert.resolved_at  # the row moved on to a pending that never fired
    ingest.ingest_events(run, [_ev(40, 5, 4, "combine_bwd", T0_NS + 501 * S, recv={"0": 9_000})])
    windows(geo, [[]] * (int(REFRESH_S) + 2), fabric="su1", start=513)
    alert.refresh_from_db()
    assert (alert.attribution["layer"], alert.attribution["phase"]) == (4, "combine_bwd")
    assert Episode.objects.get().attribution["phase"] == "combine_bwd"
