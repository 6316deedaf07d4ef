"""gNMI settings in the topology file: optional per switch, round trips, clear errors.

    defaults: {gnmi: {sample_interval_s: 0.5}}
    switches:
      - name: leaf-r0 ... gnmi: {port: 50051}      → GnmiSettings(50051, 0.5)
      - name: spine0  ... (no gnmi block)          → gnmi None: SNMP only
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from fabricmon.core.topology.spec import GnmiSettings
from fabricmon.core.topology.yaml_dump import dump_fabric
from fabricmon.core.topology.yaml_fields import TopologyError
from fabricmon.core.topology.yaml_load import load_fabric
from tests.topologies import two_leaf_one_spine


def fabric_with_gnmi():
    fab = two_leaf_one_spine("g1", servers=2)
    sws = tuple(
        replace(sw, gnmi=GnmiSettings(port=50051 + k, sample_interval_s=0.5 if k else 1.0))
        if sw.role == "leaf" else sw
        for k, sw in enumerate(fab.switches)
    )
    return replace(fab, switches=sws)


def test_round_trip_keeps_gnmi_and_its_absence() -> None:
    fab = fabric_with_gnmi()
    text = dump_fabric(fab)
    assert load_fabric(text) == fab
    doc = yaml.safe_load(text)
    blocks = {sw["name"]: sw.get("gnmi") for sw in doc["switches"]}
    assert blocks["leaf-r0"] == {"port": 50051}  # the default interval is not written
    assert blocks["leaf-r1"] == {"port": 50052, "sample_interval_s": 0.5}
    assert blocks["spine0"] is None


def test_defaults_merge_under_the_switch_block_and_empty_block_enables() -> None:
    doc = yaml.safe_load(dump_fabric(fabric_with_gnmi()))
    doc["defaults"]["gnmi"] = {"sample_interval_s": 0.2, "port": 6030}
    doc["switches"][0]["gnmi"] = {}
    doc["switches"][1]["gnmi"] = {"port": 7000}
    spec = load_fabric(yaml.safe_dump(doc))
    by_name = {sw.name: sw for sw in spec.switches}
    assert by_name["leaf-r0"].gnmi == GnmiSettings(6030, 0.2)
    assert by_name["leaf-r1"].gnmi == GnmiSettings(7000, 0.2)
    assert by_name["spine0"].gnmi is None  # defaults alone do not give a switch a target


def test_bad_gnmi_values_are_named_with_entry_and_field() -> None:
    doc = yaml.safe_load(dump_fabric(fabric_with_gnmi()))
    doc["switches"][0]["gnmi"] = {"port": 70000, "sample_interval_s": "fast", "encoding": "json"}
    doc["defaults"]["gnmi"] = {"sample_intervl_s": 1}
    with pytest.raises(TopologyError) as err:
        load_fabric(yaml.safe_dump(doc), source="g1.yaml")
    text = "\n".join(err.value.problems)
    assert "switches[0] (leaf-r0).gnmi: field 'port': expected a TCP port (1-65535), got 70000" in text
    assert "field 'sample_interval_s': expected a positive number of seconds, got 'fast'" in text
    assert "switches[0] (leaf-r0).gnmi: field 'encoding': unknown field" in text
    assert "defaults.gnmi: field 'sample_intervl_s': unknown field" in text
    assert all(p.startswith("g1.yaml") for p in err.value.problems)
