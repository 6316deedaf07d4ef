"""What detection needs from the port index, precomputed once per topology version: which ports
are host-facing leaf ports, uplinks and spine ports, uplink groups per leaf (for ``reduceat``), and
port → host / GPU for trajectories.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from fabricmon.core.topology.port_index import PortIndex
from fabricmon.core.topology.spec import FabricSpec

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class FabricGeometry:
    """What detection needs from the port index, precomputed once per topology version."""

    index: PortIndex
    is_leaf_host: BoolArray  # leaf port facing a NIC
    is_spine: BoolArray
    is_uplink: BoolArray  # leaf port facing a spine
    incast_candidate: BoolArray  # egress ports the incast rule judges (host-facing + spine downlinks)
    uplink_ports: IntArray  # indices of uplinks, grouped by switch (index order)
    uplink_group_starts: IntArray  # reduceat offsets into uplink_ports, one per leaf with uplinks
    uplink_group_switch: IntArray  # switch id of each group
    speed_bps: FloatArray
    host_of: IntArray  # per port: host number facing it, −1 if none
    gpu_of: IntArray  # per port: GPU index on that host, −1 if none
    # per port: its place in its scalable unit — (rail, port name) for a leaf's host port, shared
    # by the same port of every SU's leaf of that rail; every other port its own. The moving-incast
    # rule compares hot sets by place, not port (window.py: a job of many EP groups has its hot
    # expert at the same place in each SU, and each window sees another subset of them)
    place: IntArray
    host_names: tuple[str, ...] = ()
    # per place: how many ports share it (the SUs that have that leaf port; 1 for any other port)
    place_ports: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def n_ports(self) -> int:
        return len(self.index)


def fabric_geometry(index: PortIndex, fabric: FabricSpec | None = None) -> FabricGeometry:
    """Masks and groups for detection; ``fabric`` (optional) adds port → host/GPU for trajectories."""
    n = len(index)
    is_spine = index.rail < 0
    is_uplink = ~index.host_facing & ~is_spine
    uplinks = np.flatnonzero(is_uplink).astype(np.int64)
    sw = index.switch_of[uplinks]
    starts = (
        np.flatnonzero(np.r_[True, sw[1:] != sw[:-1]]).astype(np.int64)
        if len(uplinks)
        else np.zeros(0, np.int64)
    )
    host_of = np.full(n, -1, np.int64)
    gpu_of = np.full(n, -1, np.int64)
    host_names: tuple[str, ...] = ()
    if fabric is not None:
        host_names = tuple(h.name for h in fabric.hosts)
        by_name = {(index.switch_names[index.switch_of[i]], index.port_names[i]): i for i in range(n)}
        for h_i, host in enumerate(fabric.hosts):
            for gpu in host.gpus:
                p = by_name.get((gpu.switch, gpu.port))
                if p is not None:
                    host_of[p], gpu_of[p] = h_i, gpu.index
    leaf_host = index.host_facing & ~is_spine
    ids: dict[tuple[int, str] | int, int] = {}  # (once per topology version: a Python pass is fine)
    rail, names = index.rail.tolist(), index.port_names
    place = np.fromiter((ids.setdefault((rail[i], names[i]) if leaf_host[i] else i, len(ids))
                         for i in range(n)), dtype=np.int64, count=n)
    return FabricGeometry(
        index=index,
        is_leaf_host=index.host_facing & ~is_spine,
        is_spine=is_spine,
        is_uplink=is_uplink,
        incast_candidate=index.host_facing | is_spine,
        uplink_ports=uplinks,
        uplink_group_starts=starts,
        uplink_group_switch=sw[starts].astype(np.int64) if len(uplinks) else np.zeros(0, np.int64),
        speed_bps=index.speed_bps.astype(np.float32),
        host_of=host_of,
        gpu_of=gpu_of,
        host_names=host_names,
        place=place,
        place_ports=np.bincount(place, minlength=len(ids)).astype(np.int64),
    )
