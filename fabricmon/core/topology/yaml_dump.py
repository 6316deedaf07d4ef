"""Write a :class:`FabricSpec` as a topology file (docs/topology-format.md).

``dump_fabric`` writes what ``load_fabric`` reads. SNMP settings shared by most switches go to
``defaults.snmp``; each switch lists only what differs. v3 secrets are written inline (the spec holds
them) — export files with v3 fabrics are secrets; hand-written files should prefer
``v3_auth_key_env`` / ``v3_priv_key_env``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, fields
from typing import Any

import yaml

from fabricmon.core.topology.spec import (
    FabricSpec,
    GnmiSettings,
    PortSpec,
    SnmpSettings,
    SwitchSpec,
)

FORMAT = "fabricmon-topology/1"


GBPS = 1_000_000_000

_SnmpField = str
_SNMP_FIELDS: tuple[_SnmpField, ...] = tuple(f.name for f in fields(SnmpSettings))


try:  # libyaml is ~10x faster on a 1-SU file; the pure-Python classes give the same result.
    _Loader: type = yaml.CSafeLoader
    _Dumper: type = yaml.CSafeDumper
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    _Loader, _Dumper = yaml.SafeLoader, yaml.SafeDumper


def dump_fabric(spec: FabricSpec) -> str:
    """The spec as a topology file; ``load_fabric(dump_fabric(s)) == s``."""
    text: str = yaml.dump(fabric_doc(spec), Dumper=_Dumper, sort_keys=False, default_flow_style=None,
                          width=200, allow_unicode=True)
    return text


def fabric_doc(spec: FabricSpec) -> dict[str, Any]:
    """The spec as the plain data of a topology file (what YAML would hold)."""
    defaults = _common_snmp([sw.snmp for sw in spec.switches])
    doc: dict[str, Any] = {"format": FORMAT, "fabric": spec.name}
    if spec.description:
        doc["description"] = spec.description
    doc["defaults"] = {"snmp": _snmp_dict(defaults, base=SnmpSettings())}
    # gNMI blocks are written whole per switch (no defaults.gnmi on export: a switch either has a
    # target or not, and the ports differ per switch anyway)
    doc["switches"] = [_switch_dict(sw, defaults) for sw in spec.switches]
    doc["hosts"] = [
        {"name": h.name, "gpus": [
            {"index": g.index, "nic": g.nic, "rail": g.rail, "switch": g.switch, "port": g.port}
            for g in h.gpus
        ]}
        for h in spec.hosts
    ]
    doc["links"] = [
        {"a": f"{ln.a_switch}:{ln.a_port}", "b": f"{ln.b_switch}:{ln.b_port}"} for ln in spec.links
    ]
    return doc


def _common_snmp(all_snmp: list[SnmpSettings]) -> SnmpSettings:
    """Per field, the value most switches share (so per-switch blocks stay short)."""
    if not all_snmp:
        return SnmpSettings()
    dicts = [asdict(s) for s in all_snmp]
    common = {k: Counter(d[k] for d in dicts).most_common(1)[0][0] for k in _SNMP_FIELDS}
    return SnmpSettings(**common)


def _snmp_dict(snmp: SnmpSettings, *, base: SnmpSettings) -> dict[str, Any]:
    have, ref = asdict(snmp), asdict(base)
    return {k: have[k] for k in _SNMP_FIELDS if have[k] != ref[k]}


def _switch_dict(sw: SwitchSpec, defaults: SnmpSettings) -> dict[str, Any]:
    out: dict[str, Any] = {"name": sw.name, "role": sw.role}
    if sw.rail is not None:
        out["rail"] = sw.rail
    out["mgmt_address"] = sw.mgmt_address
    snmp = _snmp_dict(sw.snmp, base=defaults)
    if snmp:
        out["snmp"] = snmp
    if sw.gnmi is not None:
        out["gnmi"] = _gnmi_dict(sw.gnmi)
    out["ports"] = [_port_dict(p) for p in sw.ports]
    return out


def _gnmi_dict(g: GnmiSettings) -> dict[str, Any]:
    out: dict[str, Any] = {"port": g.port}
    if g.sample_interval_s != GnmiSettings().sample_interval_s:
        out["sample_interval_s"] = g.sample_interval_s
    return out


def _port_dict(p: PortSpec) -> dict[str, Any]:
    speed: dict[str, int] = (
        {"speed_gbps": p.speed_bps // GBPS} if p.speed_bps % GBPS == 0 else {"speed_bps": p.speed_bps}
    )
    return {"ifindex": p.ifindex, "name": p.name, **speed, "facing": p.facing}
