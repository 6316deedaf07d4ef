"""Topology services against the real test database: import, read back, port index, peers, rail plan.

Scenarios use the fixture topology ``tiny`` (``two_leaf_one_spine``: 2 servers x 2 GPUs,
1 spine, one uplink per leaf)::

                          [spine0]
                 Ethernet1 /      \\ Ethernet2
                          /        \\
               Ethernet3 /          \\ Ethernet3
                  [leaf-r0]        [leaf-r1]              rail 0            rail 1
           Ethernet1 |   | Ethernet2   Ethernet1 |   | Ethernet2
                     |   |                       |   |
        node001 gpu0 mlx5_0  node002 gpu0   node001 gpu1 mlx5_1  node002 gpu1 mlx5_1

    port index: 0 leaf-r0:1  1 leaf-r0:2  2 leaf-r0:3 | 3 leaf-r1:1  4 leaf-r1:2  5 leaf-r1:3 |
                6 spine0:1   7 spine0:2
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from django.db import IntegrityError

from fabricmon.core.topology.port_index import build_port_index
from fabricmon.core.topology.spec import FabricSpec, GpuSpec, HostSpec, SnmpSettings
from fabricmon.core.topology.yaml_fields import TopologyError
from fabricmon.topology.fabric_view import fabric_view
from fabricmon.topology.models import Fabric, Gpu, Host, Link, Nic, Port, Switch, TopologyVersion
from fabricmon.topology.services import (
    FabricExistsError,
    collector_protocols,
    fabric_spec,
    import_fabric,
    port_peers,
    rail_plan_violations,
)
from tests.topologies import one_su_256_gpus, two_leaf_one_spine

pytestmark = pytest.mark.django_db
MODELS = (Fabric, Switch, Port, Link, Host, Gpu, Nic, TopologyVersion)


def tiny(name: str = "tiny", **kw: object) -> FabricSpec:
    """``two_leaf_one_spine`` with one uplink per leaf: the smallest fabric with every part."""
    return two_leaf_one_spine(name, **{"uplinks_per_leaf": 1, **kw})  # type: ignore[arg-type]


def row_counts() -> dict[str, int]:
    return {m.__name__: m.objects.count() for m in MODELS}


def miscable(spec: FabricSpec) -> FabricSpec:
    """Swap the cables of node001's two NICs: mlx5_0 (rail 0) lands on leaf-r1 and vice versa."""
    h = spec.hosts[0]
    g0, g1 = h.gpus
    swapped = (replace(g0, switch=g1.switch, port=g1.port), replace(g1, switch=g0.switch, port=g0.port))
    return replace(spec, hosts=(HostSpec(h.name, swapped), *spec.hosts[1:]))


# 1. import, then read the same fabric back
def test_import_and_read_back_two_leaf_one_spine() -> None:
    spec = tiny()
    fabric = import_fabric(spec)
    assert row_counts() == {"Fabric": 1, "Switch": 3, "Port": 8, "Link": 2, "Host": 2, "Gpu": 4, "Nic": 4,
                            "TopologyVersion": 1}
    assert fabric_spec("tiny") == spec
    core = build_port_index(spec)
    assert fabric.topology_version == core.version
    keys = list(Port.objects.order_by("index").values_list("switch__name", "ifindex"))
    assert keys == [("leaf-r0", 1), ("leaf-r0", 2), ("leaf-r0", 3), ("leaf-r1", 1), ("leaf-r1", 2),
                    ("leaf-r1", 3), ("spine0", 1), ("spine0", 2)]
    version = TopologyVersion.objects.get()
    assert version.port_keys[:3] == ["leaf-r0:1", "leaf-r0:2", "leaf-r0:3"]
    assert version.port_peers[0] == "node001 gpu0 mlx5_0" and version.port_peers[2] == "spine0:Ethernet1"


# 2. one scalable unit: 768 ports, 256 GPUs, exact round trip, index equal to core's
def test_one_su_round_trip_and_port_index() -> None:
    spec = one_su_256_gpus()
    import_fabric(spec)
    assert Port.objects.count() == 768 and Nic.objects.count() == 256
    assert fabric_spec("su1") == spec
    ours, core = fabric_view("su1").index, build_port_index(spec)
    assert ours.version == core.version and ours.switch_names == core.switch_names
    for name in ("switch_of", "ifindex", "speed_bps", "host_facing", "rail"):
        np.testing.assert_array_equal(getattr(ours, name), getattr(core, name))
    assert list(Port.objects.order_by("index").values_list("index", flat=True)) == list(range(768))
    assert Port.objects.get(switch__name="leaf-r1", ifindex=1).index == core.position("leaf-r1", 1)


def test_snmp_settings_survive_the_database() -> None:
    v3 = SnmpSettings(version="3", v3_user="mon", v3_auth_protocol="SHA256", v3_auth_key="authpass1",
                      v3_priv_protocol="AES256", v3_priv_key="privpass1", v3_context="ctx",
                      interval_s=10.0, timeout_s=2.5, retries=2)
    spec = tiny(snmp=v3)
    import_fabric(spec)
    back = fabric_spec("tiny")
    assert back == spec and back.switches[2].snmp.port == 16102 and back.switches[0].snmp.v3_priv_key == "privpass1"
    sw = Switch.objects.get(name="leaf-r0")
    assert "authpass1" not in str(sw) + repr(sw) and "privpass1" not in str(sw) + repr(sw)


# 3. re-import replaces the contents, keeps the fabric row and the version history
def test_reimport_replaces_and_keeps_history() -> None:
    first = import_fabric(tiny())
    old_keys = TopologyVersion.objects.get().port_keys
    bigger = two_leaf_one_spine("tiny", servers=3, uplinks_per_leaf=1)
    second = import_fabric(bigger)
    assert second.pk == first.pk and second.topology_version != first.topology_version
    assert fabric_spec("tiny") == bigger and Port.objects.count() == 2 * (3 + 1) + 2
    versions = {v.version: v.port_keys for v in TopologyVersion.objects.all()}
    assert versions[first.topology_version] == old_keys and len(versions) == 2
    # same layout again: no new version row
    import_fabric(bigger)
    assert TopologyVersion.objects.count() == 2


def test_no_replace_refuses_and_changes_nothing() -> None:
    import_fabric(tiny())
    before = row_counts()
    with pytest.raises(FabricExistsError, match="'tiny' exists"):
        import_fabric(two_leaf_one_spine("tiny", servers=4), replace=False)
    assert row_counts() == before and fabric_spec("tiny") == tiny()


# 4. all-or-nothing: an invalid spec, and a spec the database refuses half-way
def test_invalid_spec_is_rejected_before_touching_existing_fabric() -> None:
    import_fabric(tiny())
    before = row_counts()
    bad = two_leaf_one_spine("tiny", servers=3, uplinks_per_leaf=1)
    leaf = bad.switches[0]
    bad = replace(bad, switches=(replace(leaf, ports=(*leaf.ports, leaf.ports[0])), *bad.switches[1:]))
    with pytest.raises(TopologyError, match=r"fabric 'tiny': switches\[0\] \(leaf-r0\)\.ports\[4\]: field 'ifindex': duplicate"):
        import_fabric(bad)
    assert row_counts() == before and fabric_spec("tiny") == tiny()


def test_database_failure_midway_rolls_everything_back() -> None:
    import_fabric(tiny())
    before = row_counts()
    spec = two_leaf_one_spine("tiny", servers=3, uplinks_per_leaf=1)
    # Unvalidated: two hosts of the same name pass the switch/port inserts, then the host insert fails.
    spec = replace(spec, hosts=(*spec.hosts, spec.hosts[0]))
    with pytest.raises(IntegrityError):
        import_fabric(spec, validate=False)
    assert row_counts() == before and fabric_spec("tiny") == tiny()


# 5. the rail plan
def test_rail_plan_check_finds_a_miscabled_and_an_uncabled_nic() -> None:
    import_fabric(tiny())
    assert rail_plan_violations("tiny") == []
    import_fabric(miscable(tiny()))
    found = rail_plan_violations("tiny")
    assert [(v.host, v.gpu, v.nic, v.rail, v.switch, v.switch_rail) for v in found] == [
        ("node001", 0, "mlx5_0", 0, "leaf-r1", 1), ("node001", 1, "mlx5_1", 1, "leaf-r0", 0)]
    assert str(found[0]) == ("node001 gpu0 mlx5_0: rail 0, cabled to leaf-r1:Ethernet1 which serves rail 1; "
                             "expected a leaf of rail 0")
    Nic.objects.filter(gpu__host__name="node002", name="mlx5_1").update(port=None)
    assert str(rail_plan_violations("tiny")[-1]) == "node002 gpu1 mlx5_1: rail 1, not cabled to any switch port"


def test_nic_on_a_spine_is_a_violation() -> None:
    spec = tiny()
    h = spec.hosts[1]
    spine = spec.switches[2]
    spine = replace(spine, ports=(*spine.ports, replace(spine.ports[0], ifindex=9, name="Ethernet9", facing="host")))
    gpus = (h.gpus[0], GpuSpec(index=1, nic="mlx5_1", rail=1, switch="spine0", port="Ethernet9"))
    spec = replace(spec, switches=(*spec.switches[:2], spine), hosts=(spec.hosts[0], HostSpec(h.name, gpus)))
    import_fabric(spec)
    (v,) = rail_plan_violations("tiny")
    assert v.switch == "spine0" and v.switch_rail is None and "no rail (a spine)" in str(v)


# 6. peers and query budgets
def test_port_peers_labels_in_index_order() -> None:
    import_fabric(tiny())
    assert port_peers("tiny") == [
        "node001 gpu0 mlx5_0", "node002 gpu0 mlx5_0", "spine0:Ethernet1",
        "node001 gpu1 mlx5_1", "node002 gpu1 mlx5_1", "spine0:Ethernet2",
        "leaf-r0:Ethernet3", "leaf-r1:Ethernet3",
    ]
    assert port_peers("tiny") == TopologyVersion.objects.get().port_peers


def test_query_counts_stay_bounded_on_one_su(django_assert_max_num_queries) -> None:  # type: ignore[no-untyped-def]
    import_fabric(one_su_256_gpus())
    with django_assert_max_num_queries(4):
        peers = port_peers("su1")
    assert len(peers) == 768 and peers[0] == "node001 gpu0 mlx5_0" and peers[-1] == "leaf-r7:Ethernet64"
    with django_assert_max_num_queries(10):  # the fabric, its spec (6) and its peers (3)
        view = fabric_view("su1")
    with django_assert_max_num_queries(1):  # cached: only the fabric lookup
        assert fabric_view("su1") is view and len(view.index) == 768
    with django_assert_max_num_queries(0):  # derived forms are built from the view, no query
        assert view.layout.n_gpus == 256 and len(view.heatmap["ports"]["peer"]) == 768
        assert view.geometry.n_ports == 768 and view.port_rows[0]["peer"] == "node001 gpu0 mlx5_0"
    with django_assert_max_num_queries(2):
        assert rail_plan_violations("su1") == []


def test_fabric_view_cache_follows_reimport_with_same_layout() -> None:
    import_fabric(tiny())
    assert fabric_view("tiny").index.speed_bps[0] == 400e9
    import_fabric(tiny(speed_gbps=800))
    index = fabric_view("tiny").index
    assert index.speed_bps[0] == 800e9 and index.version == build_port_index(tiny()).version


def test_collector_protocol_defaults_to_snmp_and_follows_the_admin() -> None:
    import_fabric(tiny())
    assert collector_protocols("tiny") == {"leaf-r0": "snmp", "leaf-r1": "snmp", "spine0": "snmp"}
    Switch.objects.filter(name="spine0").update(collector=Switch.Collector.BOTH)
    assert collector_protocols("tiny")["spine0"] == "both"
    import_fabric(tiny())  # re-import keeps what the operator chose
    assert collector_protocols("tiny")["spine0"] == "both"
