"""The port index: one stable fabric-wide order of (switch, ifIndex).

Everything downstream (frames, heatmap rows, rates, detection) is indexed by it: leaves by rail
then name, host-facing ports before fabric-facing ones, then spines. The index's ``version`` is a
hash of that order, so a frame names the layout it was indexed against and history stays readable
after re-cabling.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fabricmon.core.topology.spec import FabricSpec, SwitchSpec


@dataclass(frozen=True)
class PortIndex:
    """The stable fabric-wide port order, as parallel arrays (one entry per port)."""

    switch_names: tuple[str, ...]  # per switch (the order switches appear in the index)
    switch_of: npt.NDArray[np.int32]  # per port: index into switch_names
    ifindex: npt.NDArray[np.int32]
    speed_bps: npt.NDArray[np.float64]
    host_facing: npt.NDArray[np.bool_]
    rail: npt.NDArray[np.int16]  # -1 for spine ports
    port_names: tuple[str, ...]
    version: str

    def __len__(self) -> int:
        return len(self.port_names)

    def slice_of(self, switch: str) -> slice:
        """Ports of one switch are contiguous in the index."""
        s = self.switch_names.index(switch)
        idx = np.flatnonzero(self.switch_of == s)
        return slice(int(idx[0]), int(idx[-1]) + 1) if len(idx) else slice(0, 0)

    def position(self, switch: str, ifindex: int) -> int:
        sl = self.slice_of(switch)
        hits = np.flatnonzero(self.ifindex[sl] == ifindex)
        if not len(hits):
            raise KeyError(f"{switch}:{ifindex}")
        return int(sl.start) + int(hits[0])


def _switch_order(sw: SwitchSpec) -> tuple[int, int, str]:
    return (0 if sw.role == "leaf" else 1, sw.rail if sw.rail is not None else 1 << 30, sw.name)


def build_port_index(fabric: FabricSpec) -> PortIndex:
    switches = sorted(fabric.switches, key=_switch_order)
    switch_of: list[int] = []
    ifindex: list[int] = []
    speed: list[float] = []
    host_facing: list[bool] = []
    rail: list[int] = []
    names: list[str] = []
    for s, sw in enumerate(switches):
        ports = sorted(sw.ports, key=lambda p: (p.facing != "host", p.ifindex))
        for p in ports:
            switch_of.append(s)
            ifindex.append(p.ifindex)
            speed.append(float(p.speed_bps))
            host_facing.append(p.facing == "host")
            rail.append(sw.rail if sw.rail is not None else -1)
            names.append(p.name)
    digest = hashlib.sha1()
    for s, i in zip(switch_of, ifindex, strict=True):
        digest.update(f"{switches[s].name}:{i};".encode())
    return PortIndex(
        switch_names=tuple(sw.name for sw in switches),
        switch_of=np.asarray(switch_of, dtype=np.int32),
        ifindex=np.asarray(ifindex, dtype=np.int32),
        speed_bps=np.asarray(speed, dtype=np.float64),
        host_facing=np.asarray(host_facing, dtype=np.bool_),
        rail=np.asarray(rail, dtype=np.int16),
        port_names=tuple(names),
        version=digest.hexdigest()[:12],
    )
