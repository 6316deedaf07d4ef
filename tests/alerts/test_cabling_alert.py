"""The LLDP rail-plan check on the twin: over SNMP (LLDP-MIB) and gNMI (OpenConfig LLDP), one NIC
mis-cabled on command is found — exactly it — and raises one rail_plan_violation alert, which
resolves when the cable is put back.

Twin fabric ``two_leaf_one_spine``-like (4 servers × 2 GPUs, 1 spine)::

              spine0
             /      \\
        leaf-r0    leaf-r1        node00i: mlx5_0 → leaf-r0:Ethernet{i}, mlx5_1 → leaf-r1:Ethernet{i}

    mis-cable: node002 mlx5_1 ─╳─ leaf-r1:Ethernet2   ──▶   leaf-r0:Ethernet2
               (node002 mlx5_0, there before, is unplugged: not seen, which is no violation)
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import CommandError, call_command

from fabricmon.alerts.cabling import check_fabric
from fabricmon.alerts.models import Alert, AlertTransition
from fabricmon.base import keys
from fabricmon.base.connections import connect
from fabricmon.topology.models import Fabric, Switch
from fabricmon.topology.services import import_fabric, set_gnmi_collector
from twin.cluster import Twin
from twin.config import TwinConfig

pytestmark = [pytest.mark.django_db, pytest.mark.integration]
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    with Twin(TwinConfig(name="cab", servers=4, gpus_per_server=2, spines=1, gnmi=True)) as tw:
        yield tw


@pytest.fixture
def fabric(twin: Twin, request: pytest.FixtureRequest) -> Iterator[Fabric]:
    row = import_fabric(twin.fabric)
    gnmi = request.param == "gnmi"
    if gnmi:  # and the SNMP agents silent: the check can only have read gNMI
        assert set_gnmi_collector(row, "gnmi") == 3
    for sw in twin.agents:
        twin.set_unreachable(sw, gnmi)
    yield row
    for sw in twin.agents:
        twin.set_unreachable(sw, False)
    twin.miscable("node002", "mlx5_1", "leaf-r1", "Ethernet2")  # as declared again
    twin.miscable("node002", "mlx5_0", "leaf-r0", "Ethernet2")


@pytest.mark.parametrize("fabric", ["snmp", "gnmi"], indirect=True)
def test_one_miscabled_nic_is_found_alone_and_alerts(twin: Twin, fabric: Fabric) -> None:
    check = check_fabric("cab", now=T0)
    assert check.errors == {}
    assert check.report.findings == ()
    assert check.report.matched == check.report.neighbours == 4 * 2 * 2 + 2 * 4  # NICs + both ends of links
    assert not Alert.objects.exists()

    moved = twin.miscable("node002", "mlx5_1", "leaf-r0", "Ethernet2")
    assert moved["from"] == ["leaf-r1:Ethernet2"] and moved["unplugged"] == "node002 port mlx5_0"
    check = check_fabric("cab", now=T0 + timedelta(seconds=60))
    (v,) = check.report.violations
    assert (v.kind, v.host, v.nic, v.rail, v.switch, v.port, v.switch_rail) == (
        "wrong_rail", "node002", "mlx5_1", 1, "leaf-r0", "Ethernet2", 0)
    assert [(f.switch, f.port, f.declared) for f in check.report.unseen] == [
        ("leaf-r0", "Ethernet2", "node002 mlx5_0")]
    (alert,) = Alert.objects.all()
    assert (alert.kind, alert.key, alert.state) == ("rail_plan_violation", "node002:mlx5_1", "firing")
    assert "node002 mlx5_1 (rail 1) is cabled to leaf-r0:Ethernet2, which serves rail 0" in alert.summary
    assert alert.details["finding"] == "wrong_rail"

    check_fabric("cab", now=T0 + timedelta(seconds=120))  # unchanged cabling: no new transition
    assert [t.to_state for t in AlertTransition.objects.order_by("id")] == ["pending", "firing"]

    out = io.StringIO()
    with pytest.raises(CommandError, match="1 cabling violation seen over LLDP"):
        call_command("check_rail_plan", "cab", "--lldp", stdout=out)
    assert "unseen: leaf-r0:Ethernet2: declared node002 mlx5_0, not seen by any switch" in out.getvalue()

    twin.miscable("node002", "mlx5_1", "leaf-r1", "Ethernet2")
    check = check_fabric("cab", now=T0 + timedelta(seconds=180))
    assert check.report.violations == ()
    alert.refresh_from_db()
    assert alert.state == "resolved"


@pytest.mark.parametrize("fabric", ["snmp"], indirect=True)
def test_an_unreachable_switch_is_an_error_logged_once(twin: Twin, fabric: Fabric,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    r = connect()
    r.delete(keys.cabling_errors("cab"))
    Switch.objects.filter(name="leaf-r1").update(timeout_s=0.2, retries=0)
    twin.set_unreachable("leaf-r1", True)
    try:
        with caplog.at_level(logging.INFO, logger="fabricmon.alerts.cabling"):
            checks = [check_fabric("cab", now=T0 + timedelta(seconds=k), r=r) for k in (0, 60)]
            twin.set_unreachable("leaf-r1", False)
            check_fabric("cab", now=T0 + timedelta(seconds=120), r=r)
            check_fabric("cab", now=T0 + timedelta(seconds=180), r=r)
    finally:
        twin.set_unreachable("leaf-r1", False)
    check = checks[0]
    assert list(check.errors) == ["leaf-r1"] and "timeout" in check.errors["leaf-r1"]
    assert check.report.findings == () and check.report.silent_switches == ("leaf-r1",)
    lines = [rec.getMessage() for rec in caplog.records]
    assert len(lines) == 2, lines  # one when it started, one when it ended: not one per check
    assert "switch leaf-r1: LLDP not read: timeout" in lines[0] and "LLDP read again" in lines[1]
    r.delete(keys.cabling_errors("cab"))


@pytest.mark.parametrize("fabric", ["snmp"], indirect=True)
def test_a_check_while_redis_is_down_records_its_alert_and_says_so_in_one_line(
    twin: Twin, fabric: Fabric, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis only dedupes the check's log lines: with it down (a real refused connection, as in the
    soak's outage, where the task ended in a traceback) the mis-cabled NIC still raises its alert."""
    import socket

    import redis

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1)
    twin.miscable("node002", "mlx5_1", "leaf-r0", "Ethernet2")
    with caplog.at_level(logging.WARNING, logger="fabricmon.alerts.cabling"):
        check = check_fabric("cab", now=T0, r=down)
    assert [v.port for v in check.report.violations] == ["Ethernet2"]
    assert Alert.objects.get(kind="rail_plan_violation", fabric="cab").state == "firing"
    lines = [rec.getMessage() for rec in caplog.records]
    assert len(lines) == 1 and "Redis unreachable" in lines[0] and f":{port}" in lines[0], lines


def test_control_api_lldp_and_miscable_bad_input(twin: Twin) -> None:
    from twin.control import ApiError, handle

    got = handle(twin, "GET", "/lldp", {"switch": "leaf-r1"})
    assert {"local_port": "Ethernet2", "system_name": "node002", "port_id": "mlx5_1"}.items() <= next(
        n for n in got["neighbours"] if n["local_port"] == "Ethernet2").items()
    for params, message in [
        ({"switch": "leaf-r0", "host": "node002", "nic": "mlx5_1"}, "miscable needs port"),
        ({"switch": "leaf-r0", "host": "node002", "nic": "eth9", "port": "Ethernet2"}, "no NIC 'eth9'"),
        ({"switch": "leaf-r0", "host": "node002", "nic": "mlx5_1", "port": "Ethernet99"}, "no port 'Ethernet99'"),
        ({"switch": "leaf-r9", "host": "node002", "nic": "mlx5_1", "port": "Ethernet2"}, "leaf-r9"),
    ]:
        with pytest.raises(ApiError, match=message) as err:
            handle(twin, "POST", "/fault/miscable", params)
        assert err.value.status in (400, 404)
    assert handle(twin, "GET", "/lldp", {"switch": "leaf-r1"}) == got  # nothing moved
