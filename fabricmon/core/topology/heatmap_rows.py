"""The heatmap's rows: ports in port-index order, their peers, and the groups they band into.

Pure code over a :class:`FabricSpec` (no Django), so it is tested with generated fabrics::

    rail 0 ┬ leaf-r0 ┬ host-facing    Ethernet1 … (peer: node001 gpu0 mlx5_0)
           │         └ fabric-facing  Ethernet33 … (peer: spine0:Ethernet1)
    rail 1 ┴ leaf-r1 …
    spines ─ spine0  ─ fabric-facing  (peer: leaf-r0:Ethernet33)

Groups are contiguous ranges of the port index (``build_port_index`` orders leaves by rail, host
ports first, then spines), so the browser collapses or zooms a group by its [start, end).
Built once per topology version (a cold path).
"""

from __future__ import annotations

import itertools
from typing import Any, TypedDict

import numpy as np

from fabricmon.core.topology.port_index import PortIndex, build_port_index
from fabricmon.core.topology.spec import FabricSpec


class Group(TypedDict):
    level: int  # 0 = rail / spines, 1 = switch, 2 = host- or fabric-facing
    label: str
    start: int
    end: int  # exclusive


def _runs(keys: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each run of equal consecutive keys."""
    if not len(keys):
        return []
    cuts = np.flatnonzero(keys[1:] != keys[:-1]) + 1
    bounds = [0, *cuts.tolist(), len(keys)]
    return list(itertools.pairwise(bounds))


def port_groups(spec: FabricSpec, index: PortIndex) -> list[Group]:
    roles = {sw.name: sw.role for sw in spec.switches}
    is_spine = np.array([roles[n] == "spine" for n in index.switch_names], dtype=bool)[index.switch_of]
    top_key = np.where(is_spine, -2, index.rail.astype(np.int32))
    groups: list[Group] = []
    for a, b in _runs(top_key):
        label = "spines" if top_key[a] == -2 else f"rail {int(index.rail[a])}"
        groups.append({"level": 0, "label": label, "start": a, "end": b})
    for a, b in _runs(index.switch_of):
        name = index.switch_names[int(index.switch_of[a])]
        groups.append({"level": 1, "label": name, "start": a, "end": b})
        if is_spine[a]:
            continue
        facing = index.host_facing[a:b].astype(np.int8)
        for fa, fb in _runs(facing):
            label = "host-facing" if facing[fa] else "fabric-facing"
            groups.append({"level": 2, "label": label, "start": a + fa, "end": a + fb})
    return groups


def fabric_layout(spec: FabricSpec, peers: list[str], index: PortIndex | None = None) -> dict[str, Any]:
    """The JSON the page fetches once per topology version: per-port columns plus groups.
    ``peers`` is per port-index position (``topology.services.port_peers``)."""
    index = index if index is not None else build_port_index(spec)
    if len(peers) != len(index):
        raise ValueError(f"{len(peers)} peer labels for {len(index)} ports of fabric {spec.name!r}")
    return {
        "fabric": spec.name,
        "topology_version": index.version,
        "n_ports": len(index),
        "switches": list(index.switch_names),
        "ports": {
            "switch": index.switch_of.tolist(),
            "name": list(index.port_names),
            "ifindex": index.ifindex.tolist(),
            "speed_bps": index.speed_bps.tolist(),
            "host_facing": index.host_facing.tolist(),
            "peer": peers,
        },
        "groups": port_groups(spec, index),
    }
