"""The fabric as plain data: switches, ports, hosts, GPUs, NICs, links — and the port index.

A rail-optimized scalable unit (32 servers × 8 GPUs) looks like this::

            [spine0]   [spine1]   [spine2]   [spine3]         8 parallel links leaf↔spine
              |  \\  ... /  |  ...
    [leaf-r0] [leaf-r1] ... [leaf-r7]                         rail-leaf r: NIC r of every server
      |          |             |
    node01: gpu0/nic0 ─ leaf-r0,  gpu1/nic1 ─ leaf-r1, …, gpu7/nic7 ─ leaf-r7
    node02: …

Everything downstream (frames, heatmap rows, rates, detection) is indexed by the *port index*:
one stable fabric-wide order of (switch, ifIndex) — leaves by rail then name, host-facing ports
before fabric-facing ones, then spines. The index's ``version`` is a hash of that order, so a
frame names the layout it was indexed against and history stays readable after re-cabling.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

Role = Literal["leaf", "spine"]
Facing = Literal["host", "fabric"]
SnmpVersion = Literal["2c", "3"]


@dataclass(frozen=True)
class SnmpSettings:
    """How to reach one switch's SNMP agent. v3 secrets are repr-hidden so they never reach logs."""

    version: SnmpVersion = "2c"
    port: int = 161
    community: str = field(default="public", repr=False)
    v3_user: str = ""
    v3_auth_protocol: str = "SHA"  # MD5 | SHA | SHA256 | NONE
    v3_auth_key: str = field(default="", repr=False)
    v3_priv_protocol: str = "AES"  # DES | AES | NONE
    v3_priv_key: str = field(default="", repr=False)
    v3_context: str = ""
    interval_s: float = 1.0
    timeout_s: float = 0.3
    retries: int = 1


@dataclass(frozen=True)
class GnmiSettings:
    """How to reach one switch's gNMI target (Subscribe STREAM/SAMPLE every ``sample_interval_s``).

    A switch without these is not reachable over gNMI; which protocol collects it is the
    ``collector`` choice (snmp | gnmi | both) kept with the switch in the database.
    """

    port: int = 9339  # IANA gNMI
    sample_interval_s: float = 1.0


@dataclass(frozen=True)
class PortSpec:
    ifindex: int
    name: str
    speed_bps: int
    facing: Facing


@dataclass(frozen=True)
class SwitchSpec:
    name: str
    role: Role
    rail: int | None
    mgmt_address: str
    snmp: SnmpSettings
    ports: tuple[PortSpec, ...]
    gnmi: GnmiSettings | None = None  # None: no gNMI target


@dataclass(frozen=True)
class GpuSpec:
    """GPU ``index`` of a host; its NIC is cabled to ``switch``:``port`` (should be its rail's leaf)."""

    index: int
    nic: str
    rail: int
    switch: str
    port: str


@dataclass(frozen=True)
class HostSpec:
    name: str
    gpus: tuple[GpuSpec, ...]


@dataclass(frozen=True)
class LinkSpec:
    """A switch-to-switch cable: ``[a_switch:a_port] ──── [b_switch:b_port]``."""

    a_switch: str
    a_port: str
    b_switch: str
    b_port: str


@dataclass(frozen=True)
class FabricSpec:
    name: str
    switches: tuple[SwitchSpec, ...]
    hosts: tuple[HostSpec, ...] = ()
    links: tuple[LinkSpec, ...] = ()
    description: str = ""

    def switch(self, name: str) -> SwitchSpec:
        for sw in self.switches:
            if sw.name == name:
                return sw
        raise KeyError(name)


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
