"""Notification groups against real HTTP receivers on 127.0.0.1 (and a real Alertmanager): alerts
come from the real services path (``services.record_check``: rail_plan_violation alerts fire at the
check that sees them and resolve at the first that does not), groups flush through
``grouping.flush_due`` and rows go out through ``delivery.deliver_due`` — the two functions the
beat runs — on the wall clock, with intervals of seconds.

    record_check ─▶ group (fabric, alertname) ─ group_wait ─▶ [a b] ─ group_interval ─▶ [a b c]
                                        … repeat_interval ─▶ [a b c]   record_check([]) ─▶ resolved

Timing is asserted only as "not before the configured interval" and "by it plus a generous
margin" (a loaded 2-core machine).
"""

from __future__ import annotations

import itertools
import json
import random
import time
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from fabricmon.alerts import delivery, grouping, services, timing
from fabricmon.alerts.forms import ReceiverForm
from fabricmon.alerts.models import Alert, NotificationGroup, Outbox, Receiver
from fabricmon.core.detection.conditions import Condition
from fabricmon.core.detection.geometry import fabric_geometry
from fabricmon.core.topology.port_index import build_port_index
from tests.topologies import two_leaf_two_spine

KIND = "rail_plan_violation"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
GW, GI, RI = 1.5, 3.0, 6.0  # group_wait, group_interval, repeat_interval (s)
MARGIN_S = 6.0  # generous: scheduling on a shared machine, and the 0.1 s tick
TICK_S = 0.1


@pytest.fixture(scope="module")
def geo():
    fabric = two_leaf_two_spine("small", servers=4)
    return fabric_geometry(build_port_index(fabric), fabric)


def check(geo, *keys: str, fabric: str = "su1", now: datetime | None = None) -> None:
    """One cabling check that sees exactly ``keys`` (a NIC each)."""
    conds = [Condition(KIND, k, f"{k} is cabled to the wrong rail leaf") for k in keys]
    services.record_check(fabric, KIND, conds, geo, now=now)


def fp(key: str, fabric: str = "su1") -> str:
    return Alert.objects.get(fabric=fabric, kind=KIND, key=key).fingerprint


def tick_until(receiver, n: int, deadline: float) -> None:
    """Run the beat's two stages every TICK_S until the receiver holds ``n`` requests."""
    while len(receiver.requests) < n:
        assert time.time() < deadline, f"{len(receiver.requests)} notifications by the deadline, wanted {n}"
        grouping.flush_due()
        delivery.deliver_due()
        time.sleep(TICK_S)


def flush_time(n: int) -> float:
    """When the n-th notification (from 1) was flushed: its outbox row's creation."""
    return Outbox.objects.order_by("id")[n - 1].created_at.timestamp()


def alerts_of(seen) -> dict[str, str]:
    return {a["fingerprint"]: a["status"] for a in seen.json()["alerts"]}


@pytest.mark.integration
@pytest.mark.django_db
def test_group_wait_group_interval_repeat_interval_and_resolve(geo, receiver, allow_loopback) -> None:
    Receiver.objects.create(name="hook", kind="webhook", url=receiver.url, group_wait_s=GW,
                            group_interval_s=GI, repeat_interval_s=RI)
    t_fire = time.time()
    check(geo, "node001:nic0", "node002:nic0")
    a, b = fp("node001:nic0"), fp("node002:nic0")

    # 1. both alerts of the group, in one message, after group_wait
    tick_until(receiver, 1, t_fire + GW + MARGIN_S)
    first = receiver.requests[0]
    assert first.arrived >= t_fire + GW
    body = first.json()
    assert body["groupLabels"] == {"alertname": KIND, "fabric": "su1"} and body["status"] == "firing"
    assert alerts_of(first) == {a: "firing", b: "firing"}
    assert first.headers["webhook-id"] == f"grp_{NotificationGroup.objects.get().pk}_1"

    # 2. a new alert of the group comes with the next tick: group_interval after the first, not before
    check(geo, "node001:nic0", "node002:nic0", "node003:nic0")
    c = fp("node003:nic0")
    tick_until(receiver, 2, flush_time(1) + GI + MARGIN_S)
    second = receiver.requests[1]
    assert second.arrived >= flush_time(1) + GI
    assert alerts_of(second) == {a: "firing", b: "firing", c: "firing"}

    # 3. nothing changes: the group is sent again after repeat_interval, and not in between
    tick_until(receiver, 3, flush_time(2) + RI + GI + MARGIN_S)
    third = receiver.requests[2]
    assert third.arrived >= flush_time(2) + RI
    assert alerts_of(third) == alerts_of(second)

    # 4. every alert resolves: one resolved notification, then the group stops
    t_resolve = time.time()
    check(geo)
    tick_until(receiver, 4, t_resolve + GI + MARGIN_S)
    fourth = receiver.requests[3].json()
    assert fourth["status"] == "resolved"
    assert {x["fingerprint"]: x["status"] for x in fourth["alerts"]} == {a: "resolved", b: "resolved", c: "resolved"}
    assert all(x["endsAt"] != "0001-01-01T00:00:00Z" for x in fourth["alerts"])
    group = NotificationGroup.objects.get()
    assert group.next_flush_at is None and group.emptied_at is not None and not group.members.exists()
    grouping.flush_due()
    assert len(receiver.requests) == 4


@pytest.mark.integration
@pytest.mark.django_db
def test_two_groups_and_send_resolved_off(geo, receiver, allow_loopback) -> None:
    Receiver.objects.create(name="quiet", kind="webhook", url=receiver.url, group_wait_s=0, send_resolved=False)
    check(geo, "node001:nic0", fabric="su1", now=T0)
    check(geo, "node002:nic0", fabric="su2", now=T0)
    grouping.flush_due(T0)
    delivery.deliver_due(T0)
    assert sorted(r.json()["groupLabels"]["fabric"] for r in receiver.requests) == ["su1", "su2"]
    check(geo, fabric="su1", now=T0 + timedelta(seconds=10))
    grouping.flush_due(T0 + timedelta(minutes=10))
    delivery.deliver_due(T0 + timedelta(minutes=10))
    assert len(receiver.requests) == 2  # the resolution was logged, not sent
    assert NotificationGroup.objects.filter(next_flush_at=None).count() == 1


@pytest.mark.integration
@pytest.mark.django_db
def test_retries_wait_within_the_jittered_bounds_and_the_group_waits_for_them(
    geo, receiver, allow_loopback, monkeypatch
) -> None:
    """A receiver that always answers 503, on a simulated clock: each retry comes within
    [0, min(300 s, 5 s · 2^(n−1))] (+ one step) of the failure before it, the waits spread over
    their bounds, and the group flushes nothing new while its notification is being retried."""
    monkeypatch.setattr(delivery, "jitter", random.Random(7).random)
    step_s = 1.0
    receiver.respond = lambda seen: (503, {}, b"down")
    Receiver.objects.create(name="down", kind="webhook", url=receiver.url, group_wait_s=0, group_interval_s=1)
    check(geo, "node001:nic0", now=T0)
    s = 0.0
    while s < 6 * 3600:
        now = T0 + timedelta(seconds=s)
        receiver.clock = s
        if s % 60 == 0:  # the group keeps changing: another NIC every minute
            check(geo, "node001:nic0", f"node{2 + int(s) // 60:03d}:nic0", now=now)
        grouping.flush_due(now)
        delivery.deliver_due(now)
        rows = list(Outbox.objects.values_list("status", flat=True))
        if rows == [Outbox.Status.FAILED]:
            break
        assert rows == [Outbox.Status.PENDING], rows  # one notification at a time per group
        s += step_s
    attempts = [r.clock for r in receiver.requests]
    assert len(attempts) == delivery.max_attempts()
    assert len({r.headers["webhook-id"] for r in receiver.requests}) == 1  # one notification, retried
    waits = [later - earlier for earlier, later in itertools.pairwise(attempts)]
    bounds = [timing.retry_bound_s(n, delivery.BACKOFF_BASE_S, delivery.BACKOFF_MAX_S)
              for n in range(1, len(attempts))]
    assert all(0 <= w <= bound + step_s for w, bound in zip(waits, bounds, strict=True)), (waits, bounds)
    spread = [w / bound for w, bound in zip(waits, bounds, strict=True)]
    assert min(spread) < 0.5 < max(spread)  # jittered: not every retry at its bound (nor at 0)
    assert "gave up after" in Outbox.objects.get().last_error


@pytest.mark.integration
@pytest.mark.django_db
def test_real_alertmanager_gets_one_post_per_change_with_ends_at_and_the_resolution(
    geo, alertmanager: str, allow_loopback
) -> None:
    rcv = Receiver.objects.create(name="am", kind="alertmanager", url=alertmanager, group_wait_s=600)
    assert grouping.timing_of(rcv).group_wait_s == 0  # Alertmanager groups; its own settings are not used
    check(geo, "node001:nic0", "node002:nic0")
    assert len(grouping.flush_due()) == 1 and delivery.deliver_due() == 1

    def ours() -> list[dict]:
        with urllib.request.urlopen(alertmanager + "/api/v2/alerts", timeout=5) as resp:
            return [a for a in json.loads(resp.read()) if a["labels"].get("source") == "fabricmon"]

    listed = ours()
    assert sorted(a["labels"]["scope"] for a in listed) == ["node001:nic0", "node002:nic0"]
    assert all(a["status"]["state"] == "active" for a in listed)
    ends = [datetime.fromisoformat(a["endsAt"].replace("Z", "+00:00")) for a in listed]
    assert all(timedelta(minutes=3) < e - datetime.now(UTC) <= timedelta(minutes=4) for e in ends)
    assert grouping.flush_due() == []  # unchanged: re-posted only after RESEND_S
    check(geo)  # both resolve
    assert len(grouping.flush_due()) == 1 and delivery.deliver_due() == 1
    for _ in range(50):  # Alertmanager marks them resolved as it processes the post
        if not [a for a in ours() if a["status"]["state"] == "active"]:
            break
        time.sleep(0.1)
    assert not [a for a in ours() if a["status"]["state"] == "active"]


@pytest.mark.django_db
@pytest.mark.parametrize(("field", "value", "error"), [
    ("group_wait_s", "5 minutes", "is not a duration"),
    ("group_wait_s", "-5s", "is not a duration"),
    ("group_interval_s", "0", "group_interval cannot be zero"),
    ("repeat_interval_s", "0", "repeat_interval cannot be zero"),
    ("repeat_interval_s", "60d", "at most 30 days"),
    ("group_by", "fabric, severity", "unknown label 'severity'"),
    ("group_by", "..., fabric", "cannot be combined"),
])
def test_bad_route_settings_are_form_errors_naming_the_field(field: str, value: str, error: str) -> None:
    data = {"name": "x", "kind": "slack", "url": "https://hooks.example.com/x", "kinds": "[]",
            "group_by": "fabric, alertname", "group_wait_s": "30s", "group_interval_s": "5m",
            "repeat_interval_s": "4h", field: value}
    form = ReceiverForm(data)
    assert not form.is_valid()
    assert list(form.errors) == [field] and error in form.errors[field][0]


@pytest.mark.django_db
def test_receivers_page_takes_durations_and_shows_errors() -> None:
    admin = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(admin)
    post = {"name": "ops", "kind": "slack", "url": "https://hooks.example.com/x", "kinds": "[]",
            "group_by": "fabric", "group_wait_s": "10s", "group_interval_s": "1m", "repeat_interval_s": "12h"}
    bad = client.post("/alerts/receivers/", {**post, "group_interval_s": "soon"})
    assert bad.status_code == 200 and "is not a duration" in bad.content.decode()
    assert not Receiver.objects.exists()
    client.post("/alerts/receivers/", post)
    rcv = Receiver.objects.get()
    assert (rcv.group_by, rcv.group_wait_s, rcv.group_interval_s, rcv.repeat_interval_s) == (
        ["fabric"], 10.0, 60.0, 43200.0)
    page = client.get("/alerts/receivers/").content.decode()
    assert 'value="30s"' in page  # the add form shows Alertmanager's defaults as durations
    omitted = {k: v for k, v in post.items() if not k.startswith(("group", "repeat"))}
    client.post("/alerts/receivers/", {**omitted, "name": "defaults"})
    d = Receiver.objects.get(name="defaults")
    assert (d.group_by, d.group_wait_s, d.group_interval_s, d.repeat_interval_s) == (
        ["fabric", "alertname"], 30.0, 300.0, 14400.0)
