"""One fabric at one topology version, as every app needs it — built once, cached, shared.

Everything downstream of the topology works on the same few derived forms of a fabric: its spec,
its port index, what each port faces, and the shapes the heatmap, detection and projection build
from those. Each app used to build and cache its own; now every app asks :func:`fabric_view`::

    Fabric row ──(one query: name, version, last update)──▶ cache hit ─▶ FabricView
                                             └─ miss: spec + peers from the database (7 queries),
                                                the rest derived lazily on first use

    FabricView.spec       core FabricSpec (switches, ports, hosts, links)
              .index      PortIndex: the order of every frame's arrays
              .peers      per port: what it faces ("node017 gpu3 mlx5_3", "spine2:Ethernet9")
              .heatmap    the live heatmap's rows and groups (layout.json)
              .geometry   detection's masks and groups
              .layout     projection's per-GPU / per-cable arrays
              .port_rows  the phase page's row labels

Keyed by (fabric id, topology version, last update), so an admin edit shows at once; the
``MAX_VIEWS`` most recently asked for stay in memory.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from fabricmon.core.detection.geometry import FabricGeometry, fabric_geometry
from fabricmon.core.phases.layout import FabricLayout
from fabricmon.core.topology.heatmap_rows import fabric_layout
from fabricmon.core.topology.port_index import PortIndex, build_port_index
from fabricmon.core.topology.spec import FabricSpec
from fabricmon.topology.models import Fabric
from fabricmon.topology.services import fabric_spec, port_peers

MAX_VIEWS = 16


@dataclass(frozen=True, eq=False)
class FabricView:
    """A stored fabric's derived forms at one topology version (see the module doc)."""

    name: str
    version: str
    spec: FabricSpec
    index: PortIndex
    peers: tuple[str, ...]

    @cached_property
    def heatmap(self) -> dict[str, Any]:
        return fabric_layout(self.spec, list(self.peers), self.index)

    @cached_property
    def geometry(self) -> FabricGeometry:
        return fabric_geometry(self.index, self.spec)

    @cached_property
    def layout(self) -> FabricLayout:
        return FabricLayout.from_spec(self.spec, self.index)

    @cached_property
    def port_rows(self) -> list[dict[str, Any]]:
        index = self.index
        return [
            {
                "switch": index.switch_names[int(index.switch_of[p])],
                "port": index.port_names[p],
                "rail": int(index.rail[p]),
                "peer": self.peers[p] if p < len(self.peers) else "",
            }
            for p in range(len(index))
        ]


_VIEWS: OrderedDict[tuple[int, str, str], FabricView] = OrderedDict()
_LOCK = threading.Lock()


def fabric_view(fabric: Fabric | str) -> FabricView:
    """The fabric's current view (``Fabric.DoesNotExist`` when there is no such fabric)."""
    row = fabric if isinstance(fabric, Fabric) else Fabric.objects.get(name=fabric)
    key = (int(row.pk), row.topology_version, row.updated.isoformat())
    with _LOCK:
        hit = _VIEWS.get(key)
        if hit is not None:
            _VIEWS.move_to_end(key)
            return hit
    spec = fabric_spec(row, secrets="omit")  # cached in every web process: no SNMP secrets
    view = FabricView(row.name, row.topology_version, spec, build_port_index(spec), tuple(port_peers(row)))
    with _LOCK:
        _VIEWS[key] = view
        while len(_VIEWS) > MAX_VIEWS:
            _VIEWS.popitem(last=False)
    return view


def find_view(name: str) -> FabricView | None:
    """The view of fabric ``name``, or None when it is not in the topology database."""
    try:
        return fabric_view(name)
    except Fabric.DoesNotExist:
        return None
