"""Lifecycle service over rows: episodes, trajectory, silences, acknowledgement, owner routing,
rules from the database, and the pages.

Small fabric (railgen 4 servers × 2 GPUs, 2 spines): the hot port moves leaf-r0 → leaf-r1 → …"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from django.contrib.auth.models import Group

from fabricmon.alerts import grouping, services
from fabricmon.alerts.models import Alert, AlertTransition, Episode, NotificationGroup, Outbox, Receiver, Rule
from fabricmon.alerts.transports import Notification
from fabricmon.core.detection.config import DetectConfig
from fabricmon.core.detection.geometry import fabric_geometry
from fabricmon.core.detection.window import MovingState, detect_window
from fabricmon.core.topology.port_index import build_port_index
from tests.topologies import two_leaf_two_spine

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 1, 1, tzinfo=UTC)
KMAX = DetectConfig().watermark_kmax_bytes


@pytest.fixture(scope="module")
def geo():
    fabric = two_leaf_two_spine("small", servers=4)
    return fabric_geometry(build_port_index(fabric), fabric)


def windows(geo, hot_per_window, *, fabric="su1", run_name="", owner_id=None, start=0, notes=None):
    """Feed one window per entry (a list of hot ports) through detection and the service; with
    ``notes``, flush the groups due after each window into it."""
    state = MovingState.initial(geo.n_ports)
    out = []
    for t, hot in enumerate(hot_per_window, start=start):
        util = np.where(geo.is_leaf_host, 0.3, 0.0).astype(np.float32)
        wm = np.full(geo.n_ports, 0.1 * KMAX, np.float32)
        if hot is None:  # a window no poll made: no data on any port
            util[:], wm[:] = np.nan, np.nan
        ports = list(hot or [])
        util[ports], wm[ports] = 0.97, 3 * KMAX
        fan = np.where(geo.is_leaf_host, 31, 0).astype(np.float32)
        state, found = detect_window(
            {"util": util, "watermark_bytes": wm}, geo, state, DetectConfig(), fan_in=fan, ts_ns=t
        )
        out += services.record_window(
            fabric,
            found,
            geo,
            now=T0 + timedelta(seconds=t),
            run_name=run_name,
            owner_id=owner_id,
            link_base="http://fabricmon.example",
        )
        if notes is not None:
            notes += flushed(T0 + timedelta(seconds=t))
    return out


def flushed(at: datetime) -> list[Notification]:
    """Flush every group due at ``at`` (its rows then count as delivered): the notifications made."""
    ids = grouping.flush_due(at)
    Outbox.objects.filter(id__in=ids).update(status=Outbox.Status.SENT)
    return [Notification.from_json(p) for p in Outbox.objects.filter(id__in=ids).values_list("payload", flat=True)]


def test_moving_incast_is_one_episode_with_its_trajectory(geo) -> None:
    host = np.flatnonzero(geo.is_leaf_host).tolist()
    Receiver.objects.create(name="all", kind="webhook", url="http://127.0.0.1:9/x", group_wait_s=0,
                            group_interval_s=1)
    notes: list[Notification] = []
    path = [
        [host[0]],
        [host[0]],
        [host[0]],
        [host[5]],
        [host[2]],
        [host[7]],
        [host[7]],
    ] + [[]] * 16  # moving incast keeps firing 15 s after it last held
    windows(geo, path, notes=notes)
    assert Episode.objects.count() == 1
    ep = Episode.objects.get()
    assert ep.kinds == ["incast", "moving_incast"] and ep.migrations == 3 and ep.closed_at is not None
    assert [s["ports"] for s in ep.trajectory] == [
        [f"leaf-r0:{geo.index.port_names[host[0]]}"],
        [f"leaf-r1:{geo.index.port_names[host[5]]}"],
        [f"leaf-r0:{geo.index.port_names[host[2]]}"],
        [f"leaf-r1:{geo.index.port_names[host[7]]}"],
    ]
    assert ep.trajectory[1]["rail_jump"] and ep.trajectory[1]["hosts"] == ["node002"]
    moving = Alert.objects.get(kind="moving_incast")
    assert moving.state == "resolved"
    states = list(moving.transitions.values_list("to_state", flat=True))
    assert states == ["pending", "firing", "resolved"]  # one alert while it moved: no flapping
    # Notifications: its group (su1, moving_incast) told of the firing and of the resolution, with
    # the episode's link; the pending state reached no group.
    sent = [(a.status, a.link) for n in notes for a in n.alerts if a.fingerprint == moving.fingerprint]
    assert [status for status, _ in sent] == ["firing", "resolved"]
    assert sent[0][1].endswith(f"/alerts/episodes/{ep.pk}/")
    assert not NotificationGroup.objects.filter(next_flush_at__isnull=False).exists()  # all emptied


def test_an_episode_opened_by_a_hop_starts_where_the_hotspot_came_from(geo) -> None:
    """At 16,896 ports a hot port blinks with the job's bursts (hot, idle, hot, …), so its own alert
    goes pending and back and never fires: the first alert is the moving incast, on the hop, and it
    opens the episode. Its trajectory must hold the hop (from → to), not only where it landed."""
    host = np.flatnonzero(geo.is_leaf_host).tolist()
    windows(geo, [[host[0]], [], [host[0]], [], [host[0]], [host[5]], [host[5]]] + [[]] * 20)
    assert not Alert.objects.filter(kind="incast", state__in=("firing", "resolved"),
                                    key__endswith=geo.index.port_names[host[0]]).exists()
    ep = Episode.objects.get(family="incast")
    names = geo.index.port_names
    assert [(s["ts_ns"], s["ports"]) for s in ep.trajectory] == [
        (4, [f"leaf-r0:{names[host[0]]}"]), (5, [f"leaf-r1:{names[host[5]]}"])]
    assert ep.migrations == 1 and ep.trajectory[1]["rail_jump"] and not ep.trajectory[0]["rail_jump"]
    # an episode opened by a hot port that stays put starts at that port alone
    Episode.objects.all().delete()
    Alert.objects.all().delete()
    windows(geo, [[host[2]]] * 4, start=100)
    assert [s["ports"] for s in Episode.objects.get(family="incast").trajectory] == [
        [f"leaf-r0:{names[host[2]]}"]]


def test_an_episode_row_is_written_when_it_changes_not_every_window(geo) -> None:
    """Its trajectory is up to 500 steps (~300 KB at 16,896 ports): rewritten every window, it held
    SQLite's write lock for seconds in the scale bench. A hot port that stays put writes it once."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    host = np.flatnonzero(geo.is_leaf_host).tolist()
    windows(geo, [[host[0]]] * 30)  # the alert fires, its episode opens and starts its trajectory
    table = Episode._meta.db_table
    with CaptureQueriesContext(connection) as queries:
        windows(geo, [[host[0]]] * 10, start=30)
    writes = [q["sql"] for q in queries if q["sql"].startswith(f'UPDATE "{table}"')]
    assert writes == [], writes
    ep = Episode.objects.get(family="incast")
    assert ep.closed_at is None and len(ep.trajectory) == 1


def test_windows_without_data_hold_the_episode_and_a_move_across_them_is_a_migration(geo) -> None:
    # soak: the twin's agents missed every poll for 5-25 s at a time; each such stretch resolved the
    # incast, closed the episode and lost the migration that happened meanwhile
    host = np.flatnonzero(geo.is_leaf_host).tolist()
    windows(geo, [[host[0]]] * 3 + [None] * 8 + [[host[5]]] * 3 + [[]] * 20)
    assert Episode.objects.filter(family="incast").count() == 1
    ep = Episode.objects.get(family="incast")
    assert [s["ports"] for s in ep.trajectory] == [
        [f"leaf-r0:{geo.index.port_names[host[0]]}"], [f"leaf-r1:{geo.index.port_names[host[5]]}"]]
    first = Alert.objects.get(kind="incast", key=f"leaf-r0:{geo.index.port_names[host[0]]}")
    resolved = first.transitions.get(to_state="resolved").at
    assert resolved >= T0 + timedelta(seconds=11)  # held over the blind windows, resolved after them
    # blind for longer than the hold: the alert resolves as it would without data
    Alert.objects.all().delete()
    Episode.objects.all().delete()
    windows(geo, [[host[1]]] * 3 + [None] * (services.HOLD_WITHOUT_DATA_WINDOWS + 10), start=1000)
    assert Alert.objects.get(kind="incast").state == "resolved"


def test_one_window_blip_never_notifies(geo) -> None:
    host = np.flatnonzero(geo.is_leaf_host).tolist()
    Receiver.objects.create(name="all", kind="webhook", url="http://127.0.0.1:9/x")
    windows(geo, [[host[1]], [], [], []])
    assert list(AlertTransition.objects.values_list("to_state", flat=True)) == ["pending", "inactive"]
    assert flushed(T0 + timedelta(hours=1)) == [] and not NotificationGroup.objects.exists()
    assert not Episode.objects.exists()


def test_silence_stores_transitions_but_sends_nothing(geo) -> None:
    host = np.flatnonzero(geo.is_leaf_host).tolist()
    Receiver.objects.create(name="all", kind="webhook", url="http://127.0.0.1:9/x")
    services.silence("su1", kind="incast", key_contains="leaf-r0", duration_s=600, now=T0)
    windows(geo, [[host[0]]] * 3)
    t = AlertTransition.objects.get(to_state="firing")
    assert t.silenced and flushed(T0 + timedelta(hours=1)) == [] and not NotificationGroup.objects.exists()


def test_owner_receiver_gets_only_its_runs_alerts(geo, django_user_model) -> None:
    alice = django_user_model.objects.create_user("alice", password="pw")
    Receiver.objects.create(name="alice", kind="slack", url="http://127.0.0.1:9/a", owner=alice)
    Receiver.objects.create(name="ops", kind="slack", url="http://127.0.0.1:9/o")
    host = np.flatnonzero(geo.is_leaf_host).tolist()
    windows(geo, [[host[0]]] * 3, fabric="su1", run_name="", owner_id=None)
    windows(geo, [[host[3]]] * 3, fabric="su2", run_name="moe-7b", owner_id=alice.pk)
    notes = flushed(T0 + timedelta(minutes=1))
    assert {a.run_name for n in notes if n.receiver == "alice" for a in n.alerts} == {"moe-7b"}
    assert sorted(a.fabric for n in notes if n.receiver == "ops" for a in n.alerts) == ["su1", "su2"]


def test_rules_from_database_disable_kinds_and_set_thresholds(geo) -> None:
    Rule.objects.create(fabric="su1", kind="incast", enabled=False)
    Rule.objects.create(fabric="su1", kind="moving_incast", params={"fan_in_min": 8})
    assert services.detect_config("su1").fan_in_min == 8
    host = np.flatnonzero(geo.is_leaf_host).tolist()
    windows(geo, [[host[0]]] * 3)
    assert not Alert.objects.filter(kind="incast").exists()


def test_pages_list_episode_ack_silence_receivers(
    geo, client, django_user_model, receiver, allow_loopback
) -> None:
    admin = django_user_model.objects.create_user("ops", password="pw")
    admin.groups.add(Group.objects.get(name="admins"))  # (the data migration's role group)
    client.force_login(admin)
    host = np.flatnonzero(geo.is_leaf_host).tolist()
    windows(geo, [[host[0]], [host[0]], [host[5]], [host[2]]])
    alert = Alert.objects.get(kind="moving_incast", state="firing")
    page = client.get("/alerts/").content.decode()
    assert "Moving incast" in page and "Acknowledge" in page
    ep = client.get(f"/alerts/episodes/{alert.episode_id}/").content.decode()
    assert "<polyline" in ep and "leaf-r1" in ep and "rail jump" in ep
    client.post(f"/alerts/{alert.pk}/ack/")
    alert.refresh_from_db()
    assert alert.acknowledged_by == admin
    client.post("/alerts/silences/", {"fabric": "su1", "kind": "", "key_contains": "", "duration_s": 600})
    assert "until" in client.get("/alerts/").content.decode()
    client.post(
        "/alerts/receivers/",
        {
            "name": "local",
            "kind": "webhook",
            "url": receiver.url,
            "secret": "",
            "fabric": "",
            "kinds": "[]",
            "send_resolved": "on",
        },
    )
    rcv = Receiver.objects.get(name="local")
    resp = client.post(f"/alerts/receivers/{rcv.pk}/test/", follow=True)
    assert "Test sent to local" in resp.content.decode() and len(receiver.requests) == 1
    bad = client.post(
        "/alerts/rules/",
        {"fabric": "su1", "kind": "incast", "for_s": 1, "keep_firing_s": 3, "params": '{"bogus": 1}'},
    )
    assert "unknown setting" in bad.content.decode()


def test_a_long_episode_page_is_as_big_as_a_short_one(geo, client, django_user_model) -> None:
    """A day of a moving hot set: 500 trajectory steps, 300 alerts, 1,500 state changes. Every part
    of the episode page is paged, so it answers the same few KB as an episode of a few steps, and
    the older pages are reachable."""
    from fabricmon.alerts.models import AlertTransition

    viewer = django_user_model.objects.create_user("ops-long", password="pw")
    viewer.groups.add(Group.objects.get(name="viewers"))  # reading episodes is a viewer's
    client.force_login(viewer)
    host = np.flatnonzero(geo.is_leaf_host).tolist()
    windows(geo, [[host[0]], [host[0]], [host[5]], [host[2]]])
    ep = Episode.objects.get()
    small = len(client.get(f"/alerts/episodes/{ep.pk}/").content)
    step = dict(ep.trajectory[-1])
    ep.trajectory = [{**step, "ts_ns": i, "ports": [f"leaf-r{i % 2}:Ethernet{i % 7}"]} for i in range(500)]
    ep.save()
    alert = ep.alerts.first()
    for i in range(300):
        Alert.objects.create(fingerprint=f"long{i}", fabric="su1", kind="incast", key=f"leaf-r0:p{i}",
                             state="resolved", active_since=T0, last_true=T0, episode=ep)
    AlertTransition.objects.bulk_create(
        [AlertTransition(alert=alert, from_state="firing", to_state="resolved", at=T0, summary="x")] * 1500)
    page = client.get(f"/alerts/episodes/{ep.pk}/").content.decode()
    assert len(page) < 4 * small + 40_000, (len(page), small)
    assert "of 500 (newest first" in page and "State changes (1" in page and "Alerts (30" in page
    assert page.count("<li>") <= 50 + 50 and "?steps=2" in page and "?changes=2" in page
    last = client.get(f"/alerts/episodes/{ep.pk}/", {"steps": 10, "changes": 999, "alerts": "x"})
    assert last.status_code == 200 and "steps 0–49 of 500" in last.content.decode()
