"""The fabric as plain data: switches, ports, hosts, GPUs, NICs, links.

A rail-optimized scalable unit (32 servers × 8 GPUs) looks like this::

            [spine0]   [spine1]   [spine2]   [spine3]         8 parallel links leaf↔spine
              |  \\\\  ... /  |  ...
    [leaf-r0] [leaf-r1] ... [leaf-r7]                         rail-leaf r: NIC r of every server
      |          |             |
    node01: gpu0/nic0 ─ leaf-r0,  gpu1/nic1 ─ leaf-r1, …, gpu7/nic7 ─ leaf-r7
    node02: …

Everything downstream is indexed by the fabric's port index (``port_index.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

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
