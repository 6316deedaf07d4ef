"""The demo's processes flush notification groups: real Celery workers (the main one and the
``delivery`` one) and beat, with the product's routes and beat schedule, on a real Redis broker,
and a recording HTTP receiver on 127.0.0.1.

    manage.py shell: record_check (2 alerts) ─▶ group ── beat: alerts.flush_groups (main worker)
                                                           └─▶ alerts.deliver (delivery worker) ─▶ receiver

Two alerts of one group arrive in one message, not before the receiver's group_wait.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from delivery_stack import DeliveryStack, StackError

pytestmark = pytest.mark.integration
GROUP_WAIT_S = 3.0
MARGIN_S = 20.0  # a beat tick, two task hand-overs and a loaded machine

FIRE = """
import time
from fabricmon.alerts import services
from fabricmon.alerts.models import Receiver
from fabricmon.core.detection.conditions import Condition
from fabricmon.core.detection.geometry import fabric_geometry
from fabricmon.core.topology.port_index import build_port_index
from tests.topologies import two_leaf_two_spine
Receiver.objects.create(name="hook", kind="webhook", url={url!r}, group_wait_s={wait!r})
fabric = two_leaf_two_spine("small", servers=4)
geo = fabric_geometry(build_port_index(fabric), fabric)
print("FIRED", time.time())
services.record_check("su1", "rail_plan_violation",
                      [Condition("rail_plan_violation", k, k + " is on the wrong leaf") for k in ("n1", "n2")], geo)
"""


def test_beat_and_the_demo_workers_send_one_message_per_group_after_group_wait(
    tmp_path: Path, redis_url: str, receiver
) -> None:
    stack = DeliveryStack(tmp_path, redis_url, {"FABRICMON_ALERTS_ALLOW_HOSTS": "127.0.0.1",
                                                 "FABRICMON_ALERTS_FLUSH_S": "0.5"})
    try:
        stack.manage("migrate", "--noinput", "-v", "0")
        stack.start("worker", "worker", "--concurrency", "1")
        stack.start("delivery", "worker", "-Q", "delivery", "--concurrency", "1")
        stack.start("beat", "beat", "--schedule", str(tmp_path / "beat-schedule"))
        stack.wait_for("a group flush on the main worker", lambda: stack.succeeded("worker", "alerts.flush_groups") > 0, 60)
        out = stack.manage("shell", "-c", FIRE.format(url=receiver.url, wait=GROUP_WAIT_S))
        fired = float(out.split("FIRED", 1)[1].split()[0])
        stack.wait_for("the group's notification", lambda: len(receiver.requests) >= 1, GROUP_WAIT_S + MARGIN_S)
        time.sleep(2 * 0.5)  # a few more flushes: nothing else may come
        (seen,) = receiver.requests
        assert seen.arrived >= fired + GROUP_WAIT_S
        body = seen.json()
        assert sorted(a["labels"]["scope"] for a in body["alerts"]) == ["n1", "n2"]
        assert body["groupLabels"] == {"alertname": "rail_plan_violation", "fabric": "su1"}
        assert stack.succeeded("delivery", "alerts.deliver") >= 1  # sent by the delivery worker
        assert "Task alerts.deliver[" not in stack.log("worker").read_text()
        assert "Task alerts.flush_groups[" not in stack.log("delivery").read_text()
    except StackError as exc:
        pytest.fail(str(exc))
    finally:
        stack.stop()
