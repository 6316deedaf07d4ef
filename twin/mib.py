"""The objects one simulated switch serves: a sorted OID table over SNMPv2-MIB system, IF-MIB
ifTable and ifXTable, with static values and live getters (counters, sysUpTime).

Served (ifIndex-indexed columns)::

    1.3.6.1.2.1.1.{1 sysDescr, 3 sysUpTime, 5 sysName}.0      1.3.6.1.2.1.2.1.0 ifNumber
    ifTable  1.3.6.1.2.1.2.2.1.{1 ifIndex, 2 ifDescr, 3 ifType, 5 ifSpeed, 7 ifAdminStatus,
             8 ifOperStatus, 13 ifInDiscards, 14 ifInErrors, 19 ifOutDiscards, 20 ifOutErrors}
    ifXTable 1.3.6.1.2.1.31.1.1.1.{1 ifName, 6 ifHCInOctets, 7 ifHCInUcastPkts, 10 ifHCOutOctets,
             11 ifHCOutUcastPkts, 15 ifHighSpeed, 18 ifAlias, 19 ifCounterDiscontinuityTime}

Both agents (the fast v2c responder and pysnmp for v3) read this one table, so they cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from fabricmon.core.topology.spec import PortSpec
from twin.counters import METRICS

SYS = (1, 3, 6, 1, 2, 1, 1)
IF_NUMBER = (1, 3, 6, 1, 2, 1, 2, 1, 0)
IF_TABLE = (1, 3, 6, 1, 2, 1, 2, 2, 1)
IFX_TABLE = (1, 3, 6, 1, 2, 1, 31, 1, 1, 1)
SYS_UPTIME = (*SYS, 3, 0)


class Kind(IntEnum):
    """How an entry's value is produced and which SNMP type it has."""

    INTEGER = 0  # static Integer32
    STRING = 1  # static OCTET STRING
    GAUGE = 2  # static Gauge32
    COUNTER32_ZERO = 3  # static Counter32 0 (ifOutErrors: the twin never corrupts a frame it sends)
    COUNTER64 = 4  # live: arg = local port * n_metrics + metric
    COUNTER32 = 5  # live, reported modulo 2^32
    UPTIME = 6  # live sysUpTime (TimeTicks)
    DISCONTINUITY = 7  # per-port TimeTicks: arg = local port


@dataclass(frozen=True)
class MibEntry:
    oid: tuple[int, ...]
    kind: Kind
    arg: int = 0
    static: int | bytes = 0


def build_switch_mib(
    switch_name: str, ports: list[PortSpec], peers: list[str], n_metrics: int, descr: str
) -> list[MibEntry]:
    """Entries sorted by OID. ``ports`` and ``peers`` are in the switch's PortIndex order; the
    counters' ``arg`` refers to that order, the OIDs to the ports' ifIndex."""
    col = {name: i for i, name in enumerate(METRICS)}
    entries: list[MibEntry] = [
        MibEntry((*SYS, 1, 0), Kind.STRING, static=descr.encode()),
        MibEntry(SYS_UPTIME, Kind.UPTIME),
        MibEntry((*SYS, 5, 0), Kind.STRING, static=switch_name.encode()),
        MibEntry(IF_NUMBER, Kind.INTEGER, static=len(ports)),
    ]
    for local, (p, peer) in enumerate(zip(ports, peers, strict=True)):
        i = p.ifindex
        live = local * n_metrics
        entries += [
            MibEntry((*IF_TABLE, 1, i), Kind.INTEGER, static=i),
            MibEntry((*IF_TABLE, 2, i), Kind.STRING, static=p.name.encode()),
            MibEntry((*IF_TABLE, 3, i), Kind.INTEGER, static=6),  # ethernetCsmacd
            MibEntry((*IF_TABLE, 5, i), Kind.GAUGE, static=min(p.speed_bps, 0xFFFFFFFF)),
            MibEntry((*IF_TABLE, 7, i), Kind.INTEGER, static=1),  # up
            MibEntry((*IF_TABLE, 8, i), Kind.INTEGER, static=1),  # up
            MibEntry((*IF_TABLE, 13, i), Kind.COUNTER32, live + col["ifInDiscards"]),
            MibEntry((*IF_TABLE, 14, i), Kind.COUNTER32, live + col["ifInErrors"]),
            MibEntry((*IF_TABLE, 19, i), Kind.COUNTER32, live + col["ifOutDiscards"]),
            MibEntry((*IF_TABLE, 20, i), Kind.COUNTER32_ZERO),
            MibEntry((*IFX_TABLE, 1, i), Kind.STRING, static=p.name.encode()),
            MibEntry((*IFX_TABLE, 6, i), Kind.COUNTER64, live + col["ifHCInOctets"]),
            MibEntry((*IFX_TABLE, 7, i), Kind.COUNTER64, live + col["ifHCInUcastPkts"]),
            MibEntry((*IFX_TABLE, 10, i), Kind.COUNTER64, live + col["ifHCOutOctets"]),
            MibEntry((*IFX_TABLE, 11, i), Kind.COUNTER64, live + col["ifHCOutUcastPkts"]),
            MibEntry((*IFX_TABLE, 15, i), Kind.GAUGE, static=p.speed_bps // 1_000_000),
            MibEntry((*IFX_TABLE, 18, i), Kind.STRING, static=peer.encode()),
            MibEntry((*IFX_TABLE, 19, i), Kind.DISCONTINUITY, local),
        ]
    entries.sort(key=lambda e: e.oid)
    return entries
