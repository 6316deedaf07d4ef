"""The real LLDP test: network namespaces joined by veth pairs, Debian's lldpd in each, LLDP-MIB
through snmpd (AgentX); fabricmon's rail-plan check finds the one mis-cabled link and nothing else.

Declared (the topology) and cabled (the veths)::

                      [spine0]
                 swp1 /      \\ swp2
               swp9  /        \\  swp9
            [leaf-r0]          [leaf-r1]
          swp1 swp2 swp3       swp1  swp2
           |    |    :          |     ┆  declared: node2 nic1 (rail 1)
         node1 node2 :        node1   ┆
          nic0 nic0  :         nic1   ┆
                     └─────── node2 nic1 is cabled to leaf-r0:swp3 instead (rail 1 on rail 0)
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from fabricmon.alerts.cabling import check_fabric
from fabricmon.alerts.models import Alert
from fabricmon.core.topology.spec import (
    FabricSpec,
    GpuSpec,
    HostSpec,
    LinkSpec,
    PortSpec,
    SnmpSettings,
    SwitchSpec,
)
from fabricmon.topology.cabling import check_cabling
from fabricmon.topology.services import import_fabric
from tests.agents.lldp_netns import LldpLab, start_lab, wait_for

pytestmark = [pytest.mark.django_db, pytest.mark.integration]
G400 = 400_000_000_000
CABLES = [
    (("leaf-r0", "swp1"), ("node1", "nic0")),
    (("leaf-r0", "swp2"), ("node2", "nic0")),
    (("leaf-r1", "swp1"), ("node1", "nic1")),
    (("leaf-r0", "swp3"), ("node2", "nic1")),  # the mistake: declared on leaf-r1:swp2
    (("leaf-r0", "swp9"), ("spine0", "swp1")),
    (("leaf-r1", "swp9"), ("spine0", "swp2")),
]


def _ports(*names: tuple[str, str]) -> tuple[PortSpec, ...]:
    return tuple(PortSpec(ifindex=i, name=n, speed_bps=G400, facing=f)  # type: ignore[arg-type]
                 for i, (n, f) in enumerate(names, start=1))  # fmt: skip


def _declared(snmp_ports: dict[str, int]) -> FabricSpec:
    def sw(name: str, role: str, rail: int | None, ports: tuple[PortSpec, ...]) -> SwitchSpec:
        snmp = SnmpSettings(port=snmp_ports[name], interval_s=10.0, timeout_s=2.0, retries=1)
        return SwitchSpec(name, role, rail, "127.0.0.1", snmp, ports)  # type: ignore[arg-type]

    host_ports = (("swp1", "host"), ("swp2", "host"))
    return FabricSpec(
        name="lab",
        switches=(
            sw("leaf-r0", "leaf", 0, _ports(*host_ports, ("swp3", "host"), ("swp9", "fabric"))),
            sw("leaf-r1", "leaf", 1, _ports(*host_ports, ("swp9", "fabric"))),
            sw("spine0", "spine", None, _ports(("swp1", "fabric"), ("swp2", "fabric"))),
        ),
        hosts=tuple(
            HostSpec(
                f"node{h}",
                (GpuSpec(0, "nic0", 0, "leaf-r0", f"swp{h}"), GpuSpec(1, "nic1", 1, "leaf-r1", f"swp{h}")),
            )
            for h in (1, 2)
        ),
        links=(LinkSpec("leaf-r0", "swp9", "spine0", "swp1"), LinkSpec("leaf-r1", "swp9", "spine0", "swp2")),
    )


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[LldpLab]:
    running = start_lab(tmp_path / "lab", ["leaf-r0", "leaf-r1", "spine0"], ["node1", "node2"], CABLES)
    try:
        yield running
    finally:
        running.stop()


def test_lldpd_lab_finds_the_one_miscabled_link(lab: LldpLab) -> None:
    import_fabric(_declared({n: a.port for n, a in lab.snmpd.items()}))
    switch_side = 4 + 2 * 2  # four host cables seen by a leaf, two uplinks seen by both ends

    def converged() -> bool:
        return check_cabling("lab").report.neighbours == switch_side

    wait_for(converged, 30.0, f"{switch_side} LLDP neighbours reported through snmpd", lab)
    check = check_cabling("lab")
    assert check.errors == {}
    (v,) = check.report.findings  # the one mis-cabled link, and nothing else
    assert (v.kind, v.switch, v.port, v.host, v.nic, v.rail, v.switch_rail) == (
        "wrong_rail",
        "leaf-r0",
        "swp3",
        "node2",
        "nic1",
        1,
        0,
    )
    assert v.seen.startswith("node2 port nic1")
    assert check.report.matched == switch_side - 1

    out = io.StringIO()
    with pytest.raises(CommandError, match="1 cabling violation seen over LLDP"):
        call_command("check_rail_plan", "lab", "--lldp", stdout=out)
    assert "node2 nic1 (rail 1) is cabled to leaf-r0:swp3, which serves rail 0" in out.getvalue()
    check_fabric("lab")
    assert list(Alert.objects.values_list("kind", "key", "state")) == [
        ("rail_plan_violation", "node2:nic1", "firing")
    ]
