"""SNMP collector: asyncio polling of IF-MIB counters into numpy snapshots (no Django) — our own
v2c/v3 client (``v2c``, ``ber``, ``usm``), pysnmp 7 as the reference and fallback (``engine``)."""

from collectors.snmp.engine import close_loop_context, loop_context
from collectors.snmp.errors import PARSE_ERRORS, SnmpPollError
from collectors.snmp.poller import IfSnapshot, SnmpPoller, SnmpTarget

__all__ = [
    "PARSE_ERRORS",
    "IfSnapshot",
    "SnmpPollError",
    "SnmpPoller",
    "SnmpTarget",
    "close_loop_context",
    "loop_context",
]
