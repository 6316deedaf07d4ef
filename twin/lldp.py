"""The twin's LLDP: every switch reports its neighbours as cabled, over SNMP (LLDP-MIB) and gNMI
(OpenConfig LLDP), and a NIC can be mis-cabled on command.

Served per switch (indexes: lldpLocPortNum = ifIndex, lldpRemTimeMark = 0, lldpRemIndex = 1)::

    1.0.8802.1.1.2.1.3.3.0                  lldpLocSysName = the switch's name
    lldpLocPortTable .{2 subtype 5 (interfaceName), 3 PortId, 4 PortDesc}.<ifIndex> = port name
    lldpRemTable     .{4 chassis subtype 7 (local), 5 ChassisId, 6 port subtype 5, 7 PortId,
                       8 PortDesc, 9 SysName}.0.<ifIndex>.1      host name / NIC name, or switch / port

``miscable(host, nic, switch, port)`` is a technician plugging the NIC's cable into another port:
its old port reports nothing any more, the new one reports the NIC (whatever was there before is
unplugged). Both agents read the changed table from the next request on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fabricmon.core.topology.cabling import LldpNeighbour, declared_neighbours
from fabricmon.core.topology.spec import PortSpec
from twin.mib import Kind, MibEntry
from twin.snmp_v2c import TableCodec

LLDP_MIB = (1, 0, 8802, 1, 1, 2, 1)
LOC_SYS_NAME = (*LLDP_MIB, 3, 3, 0)
LOC_PORT = (*LLDP_MIB, 3, 7, 1)
REM = (*LLDP_MIB, 4, 1, 1)
PORT_ID_IFNAME, CHASSIS_ID_LOCAL = 5, 7


def lldp_entries(
    switch: str, ports: Sequence[PortSpec], neighbours: Sequence[LldpNeighbour]
) -> list[MibEntry]:
    """The LLDP-MIB rows of one switch (unsorted)."""
    out = [MibEntry(LOC_SYS_NAME, Kind.STRING, static=switch.encode())]
    ifindex = {p.name: p.ifindex for p in ports}
    for p in ports:
        out += [
            MibEntry((*LOC_PORT, 2, p.ifindex), Kind.INTEGER, static=PORT_ID_IFNAME),
            MibEntry((*LOC_PORT, 3, p.ifindex), Kind.STRING, static=p.name.encode()),
            MibEntry((*LOC_PORT, 4, p.ifindex), Kind.STRING, static=p.name.encode()),
        ]
    for n in neighbours:
        i = ifindex.get(n.local_port)
        if i is None:
            continue
        idx = (0, i, 1)
        out += [
            MibEntry((*REM, 4, *idx), Kind.INTEGER, static=CHASSIS_ID_LOCAL),
            MibEntry((*REM, 5, *idx), Kind.STRING, static=(n.chassis_id or n.system_name).encode()),
            MibEntry((*REM, 6, *idx), Kind.INTEGER, static=PORT_ID_IFNAME),
            MibEntry((*REM, 7, *idx), Kind.STRING, static=n.port_id.encode()),
            MibEntry((*REM, 8, *idx), Kind.STRING, static=n.port_desc.encode()),
            MibEntry((*REM, 9, *idx), Kind.STRING, static=n.system_name.encode()),
        ]
    return out


def _is_lldp(e: MibEntry) -> bool:
    return e.oid[: len(LLDP_MIB)] == LLDP_MIB


class TwinLldp:
    """Mixed into :class:`twin.cluster.Twin` (which owns the fabric, the agents and the loop)."""

    fabric: Any
    agents: Any
    _protocols: Any

    def _init_lldp(self) -> None:
        self.cabling: dict[str, dict[str, LldpNeighbour]] = {sw.name: {} for sw in self.fabric.switches}
        for n in declared_neighbours(self.fabric):
            self.cabling[n.switch][n.local_port] = n

    def lldp_neighbours(self, switch: str) -> list[LldpNeighbour]:
        """What ``switch`` reports now, in port order of its table."""
        return list(self.cabling[switch].values())

    def lldp_mib(self, switch: str) -> list[MibEntry]:
        return lldp_entries(switch, self.fabric.switch(switch).ports, self.lldp_neighbours(switch))

    def miscable(self, host: str, nic: str, switch: str, port: str) -> dict[str, Any]:
        """Plug ``host``'s ``nic`` into ``switch:port`` instead of where it is; returns what moved."""
        if switch not in self.cabling:
            raise ValueError(f"no switch {switch!r}")
        if port not in {p.name for p in self.fabric.switch(switch).ports}:
            raise ValueError(f"{switch} has no port {port!r}")
        was = [(sw, p) for sw, rows in self.cabling.items() for p, n in rows.items()
               if n.system_name == host and n.port_id == nic]  # fmt: skip
        if not was and not any(
            h.name == host and any(g.nic == nic for g in h.gpus) for h in self.fabric.hosts
        ):
            raise ValueError(f"no NIC {nic!r} on host {host!r}")
        displaced = self.cabling[switch].get(port)
        for sw, p in was:
            del self.cabling[sw][p]
        self.cabling[switch][port] = LldpNeighbour(switch, port, system_name=host, port_id=nic, port_desc=nic)
        for sw in {switch, *(s for s, _ in was)}:
            self._serve_lldp(sw)
        return {
            "host": host,
            "nic": nic,
            "from": [f"{s}:{p}" for s, p in was],
            "to": f"{switch}:{port}",
            "unplugged": displaced.label() if displaced is not None else "",
        }

    def _serve_lldp(self, switch: str) -> None:
        """Swap the switch's LLDP rows into its agent table (on the twin's loop when it runs)."""
        state = self.agents.get(switch)
        if state is None:
            return
        entries = sorted([e for e in state.entries if not _is_lldp(e)] + self.lldp_mib(switch),
                         key=lambda e: e.oid)  # fmt: skip

        def apply() -> None:
            state.entries = entries
            state.keys = [e.oid for e in entries]
            proto = self._protocols.get(switch)
            if proto is not None:
                proto.codec = TableCodec(state)

        if getattr(self, "_loop", None) is not None:
            self._on_loop(apply)  # type: ignore[attr-defined]
        else:
            apply()
