"""SNMP collector: pysnmp 7 asyncio polling of IF-MIB counters into numpy snapshots (no Django)."""

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
