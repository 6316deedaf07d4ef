"""Discovery against a real snmpd serving switch recordings: ports by name, a dry-run diff, apply.

Fixture topology ``two_leaf_one_spine`` (2 servers), leaf-r0 as stored::

        [spine0] Eth1  Eth2
                  |     |
    [leaf-r0] Eth3(3) Eth4(4)      Eth1(1) ═ node001 mlx5_0     Eth2(2) ═ node002 mlx5_0

and as the recording reports it after a reboot and a re-patch::

    ifIndex 1 Ethernet1   ifIndex 2 Ethernet3 (was 3)   ifIndex 3 Ethernet2 (was 2, now 200G)
    ifIndex 6 Ethernet5 (new; LLDP: spine0)   1000 Port-Channel1 (LAG, new)
    20 Vlan100, 21 Loopback0 (not fabric ports)          Ethernet4: gone
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from fabricmon.core.topology.spec import SnmpSettings
from fabricmon.topology.discovery import discover_switch
from fabricmon.topology.models import Fabric, Link, Nic, Port, Switch
from fabricmon.topology.services import import_fabric
from tests.agents.netsnmp import Snmpd, V3User, free_udp_port
from tests.agents.switch_recording import (
    RecordedNeighbour,
    RecordedPort,
    start_recorded_snmpd,
    switch_cells,
    write_cells,
)
from tests.topologies import two_leaf_one_spine

pytestmark = [pytest.mark.django_db, pytest.mark.integration]
G = 1_000_000_000

REBOOTED = [
    RecordedPort(1, "Ethernet1"),
    RecordedPort(2, "Ethernet3"),
    RecordedPort(3, "Ethernet2", speed_bps=200 * G),
    RecordedPort(6, "Ethernet5"),
    RecordedPort(1000, "Port-Channel1", if_type=161, speed_bps=800 * G),
    RecordedPort(20, "Vlan100", if_type=135, speed_bps=0),
    RecordedPort(21, "Loopback0", if_type=24, speed_bps=0),
]
NEIGHBOURS = [
    RecordedNeighbour(1, "node001.cluster.local", "mlx5_0"),
    RecordedNeighbour(3, "node002", "mlx5_0"),
    RecordedNeighbour(2, "spine0", "Ethernet1"),
    RecordedNeighbour(6, "spine0", "Ethernet9"),
]


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[Snmpd, Path]]:
    snmpd, cells = start_recorded_snmpd(tmp_path / "leaf-r0", switch_cells("leaf-r0", REBOOTED, NEIGHBOURS))
    yield snmpd, cells
    snmpd.stop()


def _fabric(port: int) -> Fabric:
    spec = two_leaf_one_spine("disc", servers=2)
    switches = tuple(dataclasses.replace(sw, snmp=dataclasses.replace(sw.snmp, port=port, timeout_s=2.0, interval_s=10.0))
                     if sw.name == "leaf-r0" else sw for sw in spec.switches)  # fmt: skip
    return import_fabric(dataclasses.replace(spec, switches=switches))


def _ports() -> dict[str, tuple[int, int, str]]:
    return {name: (ifx, speed, facing) for name, ifx, speed, facing in
            Port.objects.filter(switch__name="leaf-r0").values_list("name", "ifindex", "speed_bps", "facing")}


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("discover_switch", *args, stdout=out)
    return out.getvalue()


def test_dry_run_diff_by_name_then_apply_then_prune(agent: tuple[Snmpd, Path]) -> None:
    fabric = _fabric(agent[0].port)
    before, version = _ports(), fabric.topology_version
    diff = discover_switch("disc", "leaf-r0")
    assert (diff.sys_name, diff.sys_descr, diff.neighbours) == ("leaf-r0", "Recorded switch OS 4.2", 4)
    assert sorted((c.action, c.name, c.ifindex, c.old_ifindex) for c in diff.changes) == [
        ("add", "Ethernet5", 6, None), ("add", "Port-Channel1", 1000, None),
        ("missing", "Ethernet4", 4, None),
        ("renumber", "Ethernet2", 3, 2), ("renumber", "Ethernet3", 2, 3),
        ("speed", "Ethernet2", 3, None),
    ]
    added = {c.name: c for c in diff.changes if c.action == "add"}
    assert added["Ethernet5"].facing == "fabric"  # its LLDP neighbour is spine0
    assert (added["Port-Channel1"].facing, added["Port-Channel1"].speed_bps) == ("host", 800 * G)
    assert [i.name for i in diff.skipped] == ["Vlan100", "Loopback0"]
    text = run("disc", "leaf-r0")
    assert "~ Ethernet2: ifIndex 2 → 3" in text and "~ Ethernet2: speed 400 Gb/s → 200 Gb/s" in text
    assert "- Ethernet4: ifIndex 4, stored but not reported by the switch" in text
    assert "dry run: nothing changed" in text
    fabric.refresh_from_db()
    assert _ports() == before and fabric.topology_version == version

    text = run("disc", "leaf-r0", "--apply")
    assert "applied" in text
    fabric.refresh_from_db()
    assert fabric.topology_version != version
    assert _ports() == {
        "Ethernet1": (1, 400 * G, "host"), "Ethernet2": (3, 200 * G, "host"),
        "Ethernet3": (2, 400 * G, "fabric"), "Ethernet4": (4, 400 * G, "fabric"),
        "Ethernet5": (6, 400 * G, "fabric"), "Port-Channel1": (1000, 800 * G, "host"),
    }
    # cables follow their ports by name, not by ifIndex
    nic = Nic.objects.get(gpu__host__name="node002", gpu__index=0)
    assert (nic.port.name, nic.port.ifindex) == ("Ethernet2", 3)
    assert Link.objects.filter(a__switch__name="leaf-r0", a__name="Ethernet3", b__name="Ethernet1").exists()
    assert "no port changes" not in run("disc", "leaf-r0")  # Ethernet4 is still missing

    text = run("disc", "leaf-r0", "--apply", "--prune")
    assert "removed Ethernet4" in text
    assert "Ethernet4" not in _ports()
    assert not Link.objects.filter(a__switch__name="leaf-r0", a__name="Ethernet4").exists()
    diff = discover_switch("disc", "leaf-r0")
    assert diff.changes == ()


def test_agent_without_if_x_table_names_ports_by_if_descr(agent: tuple[Snmpd, Path]) -> None:
    """A 32-bit-only agent: no ifName, no ifHighSpeed; ifSpeed saturates for 400G (unknown, kept)."""
    snmpd, cells = agent
    _fabric(snmpd.port)
    ports = [RecordedPort(i, f"Ethernet{i}") for i in (1, 2, 3, 4)] + [RecordedPort(9, "Gi0/1", speed_bps=G)]
    write_cells(cells, switch_cells("leaf-r0", ports, if_x_table=False))
    diff = discover_switch("disc", "leaf-r0")
    assert [(c.action, c.name, c.speed_bps) for c in diff.changes] == [("add", "Gi0/1", G)]
    assert diff.neighbours == 0


def test_errors_are_command_errors(agent: tuple[Snmpd, Path]) -> None:
    _fabric(agent[0].port)
    with pytest.raises(CommandError, match="has no switch 'leaf-r9'"):
        run("disc", "leaf-r9")
    with pytest.raises(CommandError, match="no fabric 'nope'"):
        run("nope", "leaf-r0")
    with pytest.raises(CommandError, match="--prune needs --apply"):
        run("disc", "leaf-r0", "--prune")
    Switch.objects.filter(name="leaf-r1").update(snmp_port=free_udp_port(), timeout_s=0.2, retries=0)
    with pytest.raises(CommandError, match="leaf-r1: SNMP walk failed: timeout"):
        run("disc", "leaf-r1")


def test_admin_actions_show_the_diff_and_apply(agent: tuple[Snmpd, Path], admin_client: Client) -> None:
    _fabric(agent[0].port)
    url = reverse("admin:topology_switch_changelist")
    leaf = Switch.objects.get(name="leaf-r0")
    page = admin_client.post(url, {"action": "discover_ports", "_selected_action": [leaf.pk]}, follow=True)
    text = page.content.decode()
    assert page.status_code == 200
    assert "~ Ethernet2: ifIndex 2 → 3" in text and "dry run: nothing changed" in text
    assert Port.objects.get(switch=leaf, name="Ethernet2").ifindex == 2
    page = admin_client.post(url, {"action": "discover_and_apply", "_selected_action": [leaf.pk]}, follow=True)
    assert "applied" in page.content.decode()
    assert Port.objects.get(switch__name="leaf-r0", name="Ethernet2").ifindex == 3
    # an unreachable switch is an error message, not a 500
    Switch.objects.filter(name="spine0").update(snmp_port=free_udp_port(), timeout_s=0.2, retries=0)
    spine = Switch.objects.get(name="spine0")
    page = admin_client.post(url, {"action": "discover_ports", "_selected_action": [spine.pk]}, follow=True)
    assert page.status_code == 200 and "spine0: timeout" in page.content.decode()


def test_v3_switch_is_discovered_through_pysnmp(tmp_path: Path) -> None:
    """An SNMPv3 (authPriv SHA/AES) switch: the same walk over pysnmp; a wrong key is an auth error."""
    user = V3User("fmuser")
    snmpd, _cells = start_recorded_snmpd(tmp_path / "v3", switch_cells("leaf-r0", REBOOTED, NEIGHBOURS),
                                         v3_users=(user,))  # fmt: skip
    try:
        spec = two_leaf_one_spine("disc", servers=2)
        v3 = SnmpSettings(version="3", port=snmpd.port, v3_user=user.name, v3_auth_key=user.auth_key,
                          v3_priv_key=user.priv_key, interval_s=10.0, timeout_s=2.0)  # fmt: skip
        switches = tuple(dataclasses.replace(sw, snmp=v3) if sw.name == "leaf-r0" else sw for sw in spec.switches)
        import_fabric(dataclasses.replace(spec, switches=switches))
        diff = discover_switch("disc", "leaf-r0")
        assert {(c.action, c.name) for c in diff.changes} >= {("renumber", "Ethernet2"), ("add", "Port-Channel1")}
        assert diff.neighbours == 4
        Switch.objects.filter(name="leaf-r0").update(v3_auth_key="not-the-key")
        with pytest.raises(CommandError, match="leaf-r0: SNMP walk failed: auth"):
            run("disc", "leaf-r0")
    finally:
        snmpd.stop()


def test_a_new_switch_is_walked_and_added(agent: tuple[Snmpd, Path]) -> None:
    """A switch the fabric does not have: walked at the given address, all its fabric ports added."""
    _fabric(free_udp_port())
    new = ["leaf-r7", "--address", "127.0.0.1", "--snmp-port", str(agent[0].port)]
    with pytest.raises(CommandError, match="a new leaf needs --rail"):
        run("disc", *new)
    text = run("disc", *new, "--rail", "7")
    assert "warning: the agent at 127.0.0.1" in text and "calls itself 'leaf-r0'" in text
    assert "+ Ethernet1: ifIndex 1, 400 Gb/s, host-facing (LLDP: node001.cluster.local port mlx5_0)" in text
    assert "dry run" in text
    assert not Switch.objects.filter(name="leaf-r7").exists()
    run("disc", *new, "--rail", "7", "--apply")
    sw = Switch.objects.get(name="leaf-r7")
    assert (sw.role, sw.rail, sw.snmp_port) == ("leaf", 7, agent[0].port)
    assert sorted(Port.objects.filter(switch=sw).values_list("name", flat=True)) == [
        "Ethernet1", "Ethernet2", "Ethernet3", "Ethernet5", "Port-Channel1"]
    with pytest.raises(CommandError, match="already has a switch 'leaf-r7'"):
        run("disc", *new, "--rail", "7")
