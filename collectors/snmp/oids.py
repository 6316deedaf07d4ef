"""Numeric OIDs the poller reads (IF-MIB, SNMPv2-MIB). Numeric only: pysnmp 7 ships no IF-MIB
and MIB lookups halve throughput (reference/telemetry.md §1.2).

Each polled column says which :class:`IfSnapshot` field it fills and which SNMP types are
accepted for it; a cell of any other type is a bad *cell*: NaN in that metric of that port only,
counted. No column is required: what identifies a port is its ifIndex, which every cell carries.
Real fleets lack columns (a FastEthernet switch serves no ifXTable, a LAG no ifInDiscards, a
tunnel no ifHighSpeed), so every metric is read per cell, and the 32-bit ifTable columns stand in
for the HC ones (:data:`FALLBACK_COLUMNS`, walked only while some port lacks its HC cell).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SYS_UPTIME = (1, 3, 6, 1, 2, 1, 1, 3)  # .0 instance: TimeTicks, 1/100 s since agent (re)start
IF_TABLE = (1, 3, 6, 1, 2, 1, 2, 2, 1)
IF_X_TABLE = (1, 3, 6, 1, 2, 1, 31, 1, 1, 1)

SnmpKind = Literal["counter64", "counter32", "gauge32", "integer", "timeticks"]


@dataclass(frozen=True)
class Column:
    """One table column: its OID prefix, the snapshot key it fills, and its SNMP kind."""

    key: str
    oid: tuple[int, ...]
    kind: SnmpKind
    # Kept for callers that build their own column lists; the poller no longer refuses a poll for
    # a missing column (issue 14: a 32-bit-only switch or one without ifHighSpeed was never up).
    required: bool = False


COLUMNS: tuple[Column, ...] = (
    Column("in_octets", (*IF_X_TABLE, 6), "counter64"),  # ifHCInOctets
    Column("out_octets", (*IF_X_TABLE, 10), "counter64"),  # ifHCOutOctets
    # Unicast only: multicast/broadcast are two more columns each and rare on an AI fabric.
    Column("in_pkts", (*IF_X_TABLE, 7), "counter64"),  # ifHCInUcastPkts
    Column("out_pkts", (*IF_X_TABLE, 11), "counter64"),  # ifHCOutUcastPkts
    Column("high_speed_mbps", (*IF_X_TABLE, 15), "gauge32"),  # ifHighSpeed
    Column("discontinuity_ticks", (*IF_X_TABLE, 19), "timeticks"),  # ifCounterDiscontinuityTime
    Column("oper_status", (*IF_TABLE, 8), "integer"),  # ifOperStatus: 1 = up
    Column("in_discards", (*IF_TABLE, 13), "counter32"),  # Counter32 only: no HC variant exists
    Column("in_errors", (*IF_TABLE, 14), "counter32"),
    Column("out_discards", (*IF_TABLE, 19), "counter32"),
)

# The 32-bit ifTable columns that stand in for a port's missing HC cell (RFC 2863 §3.1.6: HC
# counters are mandatory only above 20 Mb/s, and many agents skip them on tunnels, VLANs and
# FastEthernet), and ifSpeed (bit/s, saturating at 2**32-1) for a missing ifHighSpeed. Their
# keys end in "32"; the snapshot merges each into its HC key with a per-port width.
FALLBACK_COLUMNS: tuple[Column, ...] = (
    Column("in_octets32", (*IF_TABLE, 10), "counter32"),  # ifInOctets
    Column("out_octets32", (*IF_TABLE, 16), "counter32"),  # ifOutOctets
    Column("in_pkts32", (*IF_TABLE, 11), "counter32"),  # ifInUcastPkts
    Column("out_pkts32", (*IF_TABLE, 17), "counter32"),  # ifOutUcastPkts
    Column("speed_bps32", (*IF_TABLE, 5), "gauge32"),  # ifSpeed
)
# fallback key → the key it stands in for
FALLBACK_FOR = {"in_octets32": "in_octets", "out_octets32": "out_octets", "in_pkts32": "in_pkts",
                "out_pkts32": "out_pkts", "speed_bps32": "high_speed_mbps"}  # fmt: skip
IF_SPEED_MAX = 2**32 - 1  # ifSpeed's "too fast to say" value (RFC 2863): use ifHighSpeed
IF_NAME = (*IF_X_TABLE, 1)  # ifName: OCTET STRING, read by a separate, rare walk (names, not counters)
IF_DESCR = (*IF_TABLE, 2)  # ifDescr: the name of an agent without ifXTable

COUNTER_KEYS = ("in_octets", "out_octets", "in_pkts", "out_pkts", "in_discards", "out_discards", "in_errors")
COUNTER32_KEYS = ("in_discards", "out_discards", "in_errors")
# The one table of counter widths: Counter32 for discards/errors (IF-MIB has no HC variant), else
# Counter64 (ifXTable HC columns).
COUNTER_WIDTH_BITS: dict[str, Literal[32, 64]] = {k: 32 if k in COUNTER32_KEYS else 64 for k in COUNTER_KEYS}


def dotted(oid: tuple[int, ...]) -> str:
    return ".".join(map(str, oid))
