"""The topology file: round trips and every import error, each naming file, entry and field.

The hand-written fixture is ``two_leaf_one_spine``::

                    [spine0]
                 Eth1 /    \\ Eth2
                     /      \\
          Eth3 [leaf-r0]  [leaf-r1] Eth3         rail-leaves, one per rail
          Eth1 /   Eth2 \\  Eth1 /   \\ Eth2
              /          \\/        \\
     node001 gpu0/mlx5_0  gpu1/mlx5_1 ...        node00N gpuR/mlx5_R ─ leaf-rR:Ethernet{N}
     node002 gpu0/mlx5_0  gpu1/mlx5_1
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest
import yaml

from fabricmon.core.topology.port_index import build_port_index
from fabricmon.core.topology.spec import SnmpSettings
from fabricmon.core.topology.yaml_dump import dump_fabric
from fabricmon.core.topology.yaml_fields import TopologyError
from fabricmon.core.topology.yaml_load import check_fabric, load_fabric
from tests.topologies import four_leaf_two_spine, one_su_256_gpus, two_leaf_one_spine


def two_leaf_one_spine_doc() -> dict[str, Any]:
    leaves = [
        {
            "name": f"leaf-r{r}", "role": "leaf", "rail": r, "mgmt_address": "127.0.0.1",
            "snmp": {"port": 16100 + r},
            "ports": [
                {"ifindex": 1, "name": "Ethernet1", "speed_gbps": 400, "facing": "host"},
                {"ifindex": 2, "name": "Ethernet2", "speed_gbps": 400, "facing": "host"},
                {"ifindex": 3, "name": "Ethernet3", "speed_gbps": 400, "facing": "fabric"},
            ],
        }
        for r in range(2)
    ]
    spine = {
        "name": "spine0", "role": "spine", "mgmt_address": "127.0.0.1", "snmp": {"port": 16102},
        "ports": [{"ifindex": i, "name": f"Ethernet{i}", "speed_gbps": 400, "facing": "fabric"} for i in (1, 2)],
    }
    return {
        "format": "fabricmon-topology/1",
        "fabric": "tiny",
        "defaults": {"snmp": {"version": "2c", "community": "public", "interval_s": 1.0, "timeout_s": 0.3,
                              "retries": 1}},
        "switches": [*leaves, spine],
        "hosts": [
            {"name": f"node00{h}", "gpus": [
                {"index": g, "nic": f"mlx5_{g}", "rail": g, "switch": f"leaf-r{g}", "port": f"Ethernet{h}"}
                for g in range(2)
            ]}
            for h in (1, 2)
        ],
        "links": [{"a": "leaf-r0:Ethernet3", "b": "spine0:Ethernet1"},
                  {"a": "leaf-r1:Ethernet3", "b": "spine0:Ethernet2"}],
    }


def problems(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(TopologyError) as info:
        load_fabric(yaml.safe_dump(doc), source="tiny.yaml")
    assert all(p.startswith("tiny.yaml: ") for p in info.value.problems)
    assert str(info.value).count("\n") == len(info.value.problems)
    return info.value.problems


# --- round trips -------------------------------------------------------------------------------


def test_rail_optimized_round_trips_exactly() -> None:
    spec = one_su_256_gpus()
    assert load_fabric(dump_fabric(spec)) == spec


def test_round_trip_keeps_port_index_and_odd_speeds_and_v3() -> None:
    v3 = SnmpSettings(version="3", v3_user="mon", v3_auth_key="authpass1", v3_priv_key="privpass1",
                      interval_s=10.0, timeout_s=2.0, retries=2)
    spec = four_leaf_two_spine("two-su", servers=40, speed_gbps=200, uplinks_per_leaf=32, snmp=v3)
    sw0 = spec.switches[0]
    odd = replace(sw0, ports=(replace(sw0.ports[0], speed_bps=2_500_000_000), *sw0.ports[1:]),
                  snmp=replace(sw0.snmp, community="other"))
    spec = replace(spec, switches=(odd, *spec.switches[1:]))
    back = load_fabric(dump_fabric(spec))
    assert back == spec
    assert build_port_index(back).version == build_port_index(spec).version


def test_hand_written_fixture_loads() -> None:
    spec = load_fabric(yaml.safe_dump(two_leaf_one_spine_doc()))
    assert [s.name for s in spec.switches] == ["leaf-r0", "leaf-r1", "spine0"]
    assert spec.switches[1].snmp.port == 16101 and spec.switches[1].snmp.timeout_s == 0.3
    assert spec.hosts[1].gpus[1].port == "Ethernet2" and spec.links[1].b_port == "Ethernet2"
    assert spec.switches[0].ports[0].speed_bps == 400_000_000_000
    assert load_fabric(dump_fabric(spec)) == spec


def test_v3_secrets_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FM_TEST_AUTH", "s3cret-auth")
    monkeypatch.setenv("FM_TEST_PRIV", "s3cret-priv")
    doc = two_leaf_one_spine_doc()
    doc["defaults"]["snmp"].update(version="3", v3_user="mon", v3_auth_protocol="sha256",
                                   v3_auth_key_env="FM_TEST_AUTH", v3_priv_key_env="FM_TEST_PRIV")
    spec = load_fabric(yaml.safe_dump(doc))
    snmp = spec.switches[2].snmp
    assert (snmp.v3_auth_key, snmp.v3_priv_key, snmp.v3_auth_protocol) == ("s3cret-auth", "s3cret-priv", "SHA256")
    assert "s3cret" not in repr(snmp)


# --- every error, named by file, entry and field -----------------------------------------------


def test_bad_speed_names_file_entry_and_field() -> None:
    doc = two_leaf_one_spine_doc()
    doc["switches"][1]["ports"][2]["speed_gbps"] = "fast"
    assert problems(doc) == [
        "tiny.yaml: switches[1] (leaf-r1).ports[2]: field 'speed_gbps': expected a positive number, got 'fast'"
    ]


def test_all_problems_are_reported_not_just_the_first() -> None:
    doc = two_leaf_one_spine_doc()
    del doc["switches"][0]["mgmt_address"]
    doc["switches"][1]["ports"][0]["ifindex"] = "one"
    doc["switches"][2]["role"] = "core"
    doc["hosts"][0]["gpus"][0]["nic"] = 7
    found = problems(doc)
    assert found == [
        "tiny.yaml: switches[0] (leaf-r0): field 'mgmt_address': missing",
        "tiny.yaml: switches[1] (leaf-r1).ports[0]: field 'ifindex': expected a positive integer, got 'one'",
        "tiny.yaml: switches[2] (spine0): field 'role': expected one of 'leaf', 'spine', got 'core'",
        "tiny.yaml: hosts[0] (node001).gpus[0]: field 'nic': expected a NIC name (e.g. mlx5_0), got 7",
    ]


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d.pop("fabric"), "tiny.yaml: field 'fabric': missing"),
        (lambda d: d.update(format="other/2"), "tiny.yaml: field 'format': expected 'fabricmon-topology/1'"),
        (lambda d: d["switches"][0].update(colour="red"), "switches[0] (leaf-r0): field 'colour': unknown field"),
        (lambda d: d["switches"][0]["ports"][1].pop("facing"), "switches[0] (leaf-r0).ports[1]: field 'facing': missing"),
        (lambda d: d["switches"][0].update(rail="zero"), "switches[0] (leaf-r0): field 'rail': expected a rail number"),
        (lambda d: d["switches"][1].update(name="leaf-r0"), "switches[1] (leaf-r0): field 'name': duplicate switch name 'leaf-r0' (also switches[0])"),
        (lambda d: d["switches"][0]["ports"][1].update(ifindex=1), "switches[0] (leaf-r0).ports[1]: field 'ifindex': duplicate ifindex 1"),
        (lambda d: d["switches"][0]["ports"][1].update(name="Ethernet1"), "switches[0] (leaf-r0).ports[1]: field 'name': duplicate port name 'Ethernet1'"),
        (lambda d: d["switches"][0].pop("rail"), "switches[0] (leaf-r0): field 'rail': missing (a leaf is a rail-leaf"),
        (lambda d: d["switches"][2].update(rail=0), "switches[2] (spine0): field 'rail': a spine has no rail"),
        (lambda d: d["hosts"][1]["gpus"][1].update(rail=5), "hosts[1] (node002).gpus[1]: field 'rail': unknown rail 5 (the leaves serve rails: 0, 1)"),
        (lambda d: d["hosts"][1]["gpus"][1].update(switch="leaf-r9"), "hosts[1] (node002).gpus[1]: field 'switch': unknown switch 'leaf-r9'"),
        (lambda d: d["hosts"][1]["gpus"][1].update(port="Ethernet9"), "hosts[1] (node002).gpus[1]: field 'port': switch 'leaf-r1' has no port 'Ethernet9'"),
        (lambda d: d["links"][1].update(b="spine7:Ethernet2"), "links[1]: field 'b': unknown switch 'spine7'"),
        (lambda d: d["links"][1].update(b="spine0"), "links[1]: field 'b': expected 'switch:port', got 'spine0'"),
        (lambda d: d["links"][1].update(b="spine0:Ethernet1"), "links[1]: field 'b': port spine0:Ethernet1 is cabled twice (also links[0])"),
        (lambda d: d["links"][0].update(a="leaf-r0:Ethernet1"), "links[0]: field 'a': port leaf-r0:Ethernet1 is cabled twice (also hosts[0] (node001).gpus[0])"),
        (lambda d: d["hosts"][1].update(name="node001"), "hosts[1] (node001): field 'name': duplicate host name 'node001'"),
        (lambda d: d["hosts"][1]["gpus"][1].update(index=0), "hosts[1] (node002).gpus[1]: field 'index': duplicate GPU index 0"),
        (lambda d: d["switches"][0].update(ports="many"), "switches[0] (leaf-r0): field 'ports': expected a list, got 'many'"),
        (lambda d: d.update(switches=None), "tiny.yaml: field 'switches': missing"),
    ],
)
def test_each_error_case(mutate: Any, expected: str) -> None:
    doc = copy.deepcopy(two_leaf_one_spine_doc())
    mutate(doc)
    found = problems(doc)
    assert any(expected in p for p in found), found


@pytest.mark.parametrize(
    ("snmp", "where", "expected"),
    [
        ({"timeout_s": 0.6}, "switches[0] (leaf-r0).snmp", "field 'timeout_s': timeout_s x (retries + 1) = 1.2 s must be < interval_s = 1 s"),
        ({"retries": -1}, "switches[0] (leaf-r0).snmp", "field 'retries': expected an integer >= 0, got -1"),
        ({"port": 70000}, "switches[0] (leaf-r0).snmp", "field 'port': expected a UDP port (1-65535), got 70000"),
        ({"version": "1"}, "switches[0] (leaf-r0).snmp", "field 'version': expected one of '2c', '3', got '1'"),
        ({"version": "3", "v3_auth_key": "longenough"}, "defaults.snmp", "field 'v3_user': SNMP v3 needs a user"),
        ({"version": "3", "v3_user": "mon"}, "defaults.snmp", "field 'v3_auth_key': SNMP v3 with auth SHA needs an auth key: missing"),
        ({"version": "3", "v3_user": "mon", "v3_auth_key": "short"}, "switches[0] (leaf-r0).snmp", "field 'v3_auth_key': SNMP v3 with auth SHA needs an auth key: shorter than 8"),
        ({"version": "3", "v3_user": "mon", "v3_auth_key": "longenough"}, "defaults.snmp", "field 'v3_priv_key': SNMP v3 with privacy AES needs a priv key: missing"),
        ({"v3_auth_protocol": "ROT13"}, "switches[0] (leaf-r0).snmp", "field 'v3_auth_protocol': expected one of 'NONE', 'MD5'"),
        ({"v3_priv_protocol": "XOR"}, "switches[0] (leaf-r0).snmp", "field 'v3_priv_protocol': expected one of 'NONE', 'DES'"),
        ({"v3_auth_key_env": "FM_SURELY_UNSET_VAR"}, "switches[0] (leaf-r0).snmp", "field 'v3_auth_key_env': environment variable 'FM_SURELY_UNSET_VAR' is not set"),
        ({"v3_auth_key": "a", "v3_auth_key_env": "X"}, "switches[0] (leaf-r0).snmp", "field 'v3_auth_key_env': give v3_auth_key or v3_auth_key_env, not both"),
        ({"communty": "x"}, "switches[0] (leaf-r0).snmp", "field 'communty': unknown field"),
    ],
)
def test_snmp_settings_errors(snmp: dict[str, Any], where: str, expected: str) -> None:
    doc = two_leaf_one_spine_doc()
    doc["switches"][0]["snmp"].update(snmp)
    found = problems(doc)
    assert any(p.startswith(f"tiny.yaml: {where}: {expected}") for p in found), found


def test_bad_default_is_reported_once_under_defaults() -> None:
    doc = two_leaf_one_spine_doc()
    doc["defaults"]["snmp"]["timeout_s"] = "slow"
    assert problems(doc) == [
        "tiny.yaml: defaults.snmp: field 'timeout_s': expected a positive number of seconds, got 'slow'"
    ]


def test_secrets_never_appear_in_errors() -> None:
    doc = two_leaf_one_spine_doc()
    doc["switches"][0]["snmp"].update(version="3", v3_user="mon", v3_auth_key="hunter2")  # too short
    doc["switches"][1]["snmp"].update(community=12345678)
    text = "\n".join(problems(doc))
    assert "hunter2" not in text and "12345678" not in text and "field 'community'" in text


def test_not_yaml_or_not_a_mapping() -> None:
    with pytest.raises(TopologyError, match=r"^1 problem in topology:\nf.yaml: line 2, column \d+: not valid YAML"):
        load_fabric("fabric: x\n  switches: [", source="f.yaml")
    with pytest.raises(TopologyError, match=r"f\.yaml: expected a mapping, got"):
        load_fabric("- 1\n- 2\n", source="f.yaml")
    with pytest.raises(TopologyError, match=r"f\.yaml: empty file"):
        load_fabric("", source="f.yaml")


def test_miscabled_nic_is_not_an_import_error() -> None:
    """Rail-plan violations are for check_rail_plan, not for the importer."""
    doc = two_leaf_one_spine_doc()
    doc["hosts"][0]["gpus"][0].update(switch="leaf-r1", port="Ethernet1")
    doc["hosts"][0]["gpus"][1].update(switch="leaf-r0", port="Ethernet1")
    spec = load_fabric(yaml.safe_dump(doc))
    assert spec.hosts[0].gpus[0].switch == "leaf-r1" and spec.hosts[0].gpus[0].rail == 0


def test_check_fabric_applies_the_file_rules_to_code_built_specs() -> None:
    spec = two_leaf_one_spine("gen", servers=2)
    check_fabric(spec)  # a good spec passes silently
    leaf = spec.switches[1]
    bad_port = replace(leaf.ports[0], speed_bps=0)
    bad = replace(spec, switches=(spec.switches[0], replace(leaf, rail=None, ports=(bad_port, *leaf.ports[1:])),
                                  *spec.switches[2:]))
    with pytest.raises(TopologyError) as info:
        check_fabric(bad)
    assert info.value.problems[:2] == [
        "fabric 'gen': switches[1] (leaf-r1): field 'rail': missing (a leaf is a rail-leaf: say which rail)",
        "fabric 'gen': switches[1] (leaf-r1).ports[0]: field 'speed_gbps': expected a positive number, got 0",
    ]
    assert "unknown rail 1" in info.value.problems[2]
