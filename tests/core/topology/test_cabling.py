"""The cabling comparison on ``two_leaf_one_spine`` (4 servers)::

          spine0
         /      \\
    leaf-r0    leaf-r1          node i: gpu0/nic0 → leaf-r0, gpu1/nic1 → leaf-r1
    node001 … node004
"""

from __future__ import annotations

import dataclasses

from fabricmon.core.topology.cabling import (
    LldpNeighbour,
    compare_cabling,
    declared_neighbours,
    short_name,
)
from tests.topologies import two_leaf_one_spine


def _fabric():  # type: ignore[no-untyped-def]
    return two_leaf_one_spine("t", servers=4)


def _nic(spec, host: str, gpu: int):  # type: ignore[no-untyped-def]
    return next(g for h in spec.hosts if h.name == host for g in h.gpus if g.index == gpu)


def test_declared_cabling_reported_as_declared_has_no_finding() -> None:
    spec = _fabric()
    seen = declared_neighbours(spec)
    report = compare_cabling(spec, seen)
    assert report.findings == ()
    assert report.matched == report.neighbours == len(seen)
    assert report.silent_switches == ()


def test_one_nic_on_the_wrong_rail_leaf_is_one_finding() -> None:
    """1. node002's rail-1 NIC moved onto a free port of leaf-r0: exactly one wrong-rail finding,
    and its declared port on leaf-r1 is not also reported unseen."""
    spec = _fabric()
    g = _nic(spec, "node002", 1)
    seen = [n for n in declared_neighbours(spec) if (n.switch, n.local_port) != (g.switch, g.port)]
    seen.append(LldpNeighbour("leaf-r0", "Ethernet99", system_name="node002.cluster.local", port_id=g.nic))
    report = compare_cabling(spec, seen)
    (f,) = report.findings
    assert (f.kind, f.switch, f.port, f.host, f.nic, f.rail, f.switch_rail) == (
        "wrong_rail", "leaf-r0", "Ethernet99", "node002", g.nic, 1, 0)
    assert f.key == f"node002:{g.nic}"
    assert "rail 1" in str(f) and "leaf-r0:Ethernet99" in str(f)


def test_swapped_nics_unknown_system_and_wrong_uplink() -> None:
    """2. Two NICs of one rail swapped (right rail, wrong port), an unknown system, and an uplink
    that lands on another spine port than declared: each unexpected; nothing unseen twice."""
    spec = _fabric()
    a, b = _nic(spec, "node001", 0), _nic(spec, "node002", 0)
    ln = spec.links[0]
    seen = []
    for declared in declared_neighbours(spec):
        n = declared
        if (n.switch, n.local_port) == (a.switch, a.port):
            n = dataclasses.replace(n, system_name="node002")
        elif (n.switch, n.local_port) == (b.switch, b.port):
            n = dataclasses.replace(n, system_name="node001")
        elif (n.switch, n.local_port) == (ln.a_switch, ln.a_port):
            n = dataclasses.replace(n, port_id="Ethernet77", port_desc="")
        seen.append(n)
    seen.append(LldpNeighbour("leaf-r1", "Ethernet50", system_name="", chassis_id="aa:bb:cc:dd:ee:ff"))
    report = compare_cabling(spec, seen)
    kinds = sorted((f.kind, f.switch, f.port) for f in report.findings)
    assert kinds == sorted([
        ("unexpected", a.switch, a.port), ("unexpected", b.switch, b.port),
        ("unexpected", ln.a_switch, ln.a_port), ("unexpected", "leaf-r1", "Ethernet50"),
    ])
    # the spine's own report of that link still matches, so the cable is not "unseen"
    assert report.unseen == ()


def test_unseen_only_on_switches_that_reported() -> None:
    """3. A host without LLDP is unseen (informational); a switch that reported nothing is silent,
    its declared peers not judged."""
    spec = _fabric()
    g = _nic(spec, "node003", 0)
    seen = [n for n in declared_neighbours(spec)
            if (n.switch, n.local_port) != (g.switch, g.port) and n.switch != "leaf-r1"]
    report = compare_cabling(spec, seen)
    assert report.violations == ()
    assert [(f.switch, f.port, f.declared) for f in report.unseen] == [(g.switch, g.port, f"node003 {g.nic}")]
    assert report.silent_switches == ("leaf-r1",)


def test_short_name() -> None:
    assert short_name(" Node01.cluster.local ") == "node01"
