"""Numeric OIDs the poller reads (IF-MIB, SNMPv2-MIB). Numeric only: pysnmp 7 ships no IF-MIB
and MIB lookups halve throughput (reference/telemetry.md §1.2).

Each polled column says which :class:`IfSnapshot` field it fills and which SNMP types are
accepted for it; a cell of any other type is a malformed row (dropped and counted).
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
    required: bool = False  # a switch that serves none of it gives a 'malformed' poll


COLUMNS: tuple[Column, ...] = (
    Column("in_octets", (*IF_X_TABLE, 6), "counter64", required=True),  # ifHCInOctets
    Column("out_octets", (*IF_X_TABLE, 10), "counter64", required=True),  # ifHCOutOctets
    # Unicast only: multicast/broadcast are two more columns each and rare on an AI fabric.
    Column("in_pkts", (*IF_X_TABLE, 7), "counter64"),  # ifHCInUcastPkts
    Column("out_pkts", (*IF_X_TABLE, 11), "counter64"),  # ifHCOutUcastPkts
    Column("high_speed_mbps", (*IF_X_TABLE, 15), "gauge32", required=True),  # ifHighSpeed
    Column("discontinuity_ticks", (*IF_X_TABLE, 19), "timeticks"),  # ifCounterDiscontinuityTime
    Column("oper_status", (*IF_TABLE, 8), "integer", required=True),  # ifOperStatus: 1 = up
    Column("in_discards", (*IF_TABLE, 13), "counter32"),  # Counter32 only: no HC variant exists
    Column("in_errors", (*IF_TABLE, 14), "counter32"),
    Column("out_discards", (*IF_TABLE, 19), "counter32"),
)

COUNTER_KEYS = ("in_octets", "out_octets", "in_pkts", "out_pkts", "in_discards", "out_discards", "in_errors")
COUNTER32_KEYS = ("in_discards", "out_discards", "in_errors")
# The one table of counter widths: Counter32 for discards/errors (IF-MIB has no HC variant), else
# Counter64 (ifXTable HC columns).
COUNTER_WIDTH_BITS: dict[str, Literal[32, 64]] = {k: 32 if k in COUNTER32_KEYS else 64 for k in COUNTER_KEYS}


def dotted(oid: tuple[int, ...]) -> str:
    return ".".join(map(str, oid))
