"""Discover a switch over SNMP: who it is, its interfaces by name, and its LLDP neighbours.

Walked (numeric OIDs; each column on its own so an agent that lacks one still answers the rest)::

    system   1.3.6.1.2.1.1.{1 sysDescr, 5 sysName}.0
    ifTable  1.3.6.1.2.1.2.2.1.{2 ifDescr, 3 ifType, 5 ifSpeed, 8 ifOperStatus}
    ifXTable 1.3.6.1.2.1.31.1.1.1.{1 ifName, 15 ifHighSpeed, 18 ifAlias}
    LLDP-MIB lldpLocPortTable, lldpRemTable (collectors/snmp/lldp.py)

An interface's name is ifName, else ifDescr (an agent without ifXTable), else ``if<ifIndex>``; its
speed ifHighSpeed (Mb/s), else ifSpeed (b/s; it saturates at 4.29 Gb/s, so only below that), else
unknown (0). Pure data out: what to do with it is the topology app's business.
"""

from __future__ import annotations

from dataclasses import dataclass

from collectors.snmp import lldp
from collectors.snmp.subtree import Oid, Varbind, column, walk
from fabricmon.core.topology.cabling import LldpNeighbour
from fabricmon.core.topology.spec import SnmpSettings

SYSTEM = (1, 3, 6, 1, 2, 1, 1)
SYS_DESCR, SYS_NAME = (*SYSTEM, 1, 0), (*SYSTEM, 5, 0)
IF_TABLE = (1, 3, 6, 1, 2, 1, 2, 2, 1)
IFX_TABLE = (1, 3, 6, 1, 2, 1, 31, 1, 1, 1)
IF_DESCR, IF_TYPE, IF_SPEED, IF_OPER = ((*IF_TABLE, c) for c in (2, 3, 5, 8))
IF_NAME, IF_HIGH_SPEED, IF_ALIAS = ((*IFX_TABLE, c) for c in (1, 15, 18))
COLUMNS: tuple[Oid, ...] = (IF_DESCR, IF_TYPE, IF_SPEED, IF_OPER, IF_NAME, IF_HIGH_SPEED, IF_ALIAS)

# IANAifType values of ports that carry fabric traffic: what discovery proposes by default
# (loopbacks, VLAN interfaces, tunnels, management and CPU ports are listed but not proposed).
ETHERNET_TYPES = frozenset({6, 62, 69, 117})  # ethernetCsmacd, fastEther, fastEtherFX, gigabitEthernet
LAG_TYPE = 161  # ieee8023adLag
FABRIC_TYPES = ETHERNET_TYPES | {LAG_TYPE}
IF_SPEED_SATURATED = 0xFFFFFFFF


@dataclass(frozen=True)
class DiscoveredInterface:
    """One interface as the switch reports it."""

    ifindex: int
    name: str
    descr: str
    alias: str
    if_type: int  # IANAifType (0: not served)
    speed_bps: int  # 0: unknown
    oper_up: bool

    @property
    def carries_fabric_traffic(self) -> bool:
        return self.if_type in FABRIC_TYPES


@dataclass(frozen=True)
class SwitchInventory:
    """What a walk of one switch found."""

    switch: str  # the name we asked under (the topology's)
    sys_name: str
    sys_descr: str
    interfaces: tuple[DiscoveredInterface, ...]
    neighbours: tuple[LldpNeighbour, ...]
    lldp_served: bool  # False: the agent has no LLDP-MIB (neighbours then says nothing)


def _scalar(rows: list[Varbind], oid: Oid) -> str:
    return next((vb.text() for vb in rows if vb.oid == oid), "")


def _int(vb: Varbind | None) -> int | None:
    return vb.value if vb is not None and isinstance(vb.value, int) else None


def interfaces_from_columns(cols: dict[Oid, dict[Oid, Varbind]]) -> tuple[DiscoveredInterface, ...]:
    """Join the walked columns by ifIndex (every index any column served), in ifIndex order."""
    indexes = sorted({k[0] for c in cols.values() for k in c if len(k) == 1})
    out = []
    for i in indexes:
        k = (i,)

        def text(col: Oid, k: Oid = k) -> str:
            vb = cols[col].get(k)
            return vb.text() if vb is not None else ""

        high, low = _int(cols[IF_HIGH_SPEED].get(k)), _int(cols[IF_SPEED].get(k))
        if high:
            speed = high * 1_000_000
        elif low and low < IF_SPEED_SATURATED:
            speed = low
        else:
            speed = 0
        out.append(
            DiscoveredInterface(
                ifindex=i,
                name=text(IF_NAME) or text(IF_DESCR) or f"if{i}",
                descr=text(IF_DESCR),
                alias=text(IF_ALIAS),
                if_type=_int(cols[IF_TYPE].get(k)) or 0,
                speed_bps=speed,
                oper_up=_int(cols[IF_OPER].get(k)) == 1,
            )
        )
    return tuple(out)


async def discover(switch: str, address: str, settings: SnmpSettings) -> SwitchInventory:
    """Walk ``switch`` at ``address``; raises only :class:`~collectors.snmp.SnmpPollError`."""
    walked = await walk(switch, address, settings, (SYSTEM, *COLUMNS, *lldp.ROOTS))
    cols = {c: column(walked[c], c) for c in COLUMNS}
    interfaces = interfaces_from_columns(cols)
    lldp_rows = walked[lldp.LLDP_LOC_PORT_TABLE] + walked[lldp.LLDP_REM_TABLE]
    names = {i.ifindex: i.name for i in interfaces}
    neighbours = lldp.neighbours_from_rows(switch, lldp_rows, names, names.values())
    return SwitchInventory(
        switch=switch,
        sys_name=_scalar(walked[SYSTEM], SYS_NAME),
        sys_descr=_scalar(walked[SYSTEM], SYS_DESCR),
        interfaces=interfaces,
        neighbours=tuple(neighbours),
        lldp_served=bool(lldp_rows),
    )
