"""What one simulated switch's agent knows at an instant: its MIB table and live values."""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from twin.mib import MibEntry

TICKS_PER_S = 100  # TimeTicks are 1/100 s


@dataclass
class LiveView:
    """Values of one switch frozen at ``t_ns`` (one per request, so a PDU is coherent)."""

    t_ns: int
    counters: list[int]  # flat (local port × metric), uint64 values as Python ints
    uptime_ticks: int
    discontinuity_ticks: list[int]


@dataclass
class SwitchAgentState:
    """A switch as its agent sees it: the sorted OID table, boot time, faults, and a value source.

    ``read_counters(t_ns)`` returns that switch's (ports, metrics) uint64 counter array.
    """

    name: str
    entries: list[MibEntry]
    read_counters: Callable[[int], np.ndarray]
    boot_ns: int
    discontinuity_ticks: list[int]
    unreachable: bool = False
    keys: list[tuple[int, ...]] = field(init=False)

    def __post_init__(self) -> None:
        self.keys = [e.oid for e in self.entries]

    def live(self, t_ns: int | None = None) -> LiveView:
        t = time.time_ns() if t_ns is None else t_ns
        counters = self.read_counters(t).ravel().tolist()
        uptime = ((t - self.boot_ns) // (1_000_000_000 // TICKS_PER_S)) & 0xFFFFFFFF
        return LiveView(t, counters, max(0, uptime), list(self.discontinuity_ticks))

    def exact(self, oid: tuple[int, ...]) -> int:
        """Position of ``oid`` in the table, or -1."""
        i = bisect.bisect_left(self.keys, oid)
        return i if i < len(self.keys) and self.keys[i] == oid else -1

    def after(self, oid: tuple[int, ...]) -> int:
        """Position of the first OID strictly after ``oid`` (== len(table) at the end of the MIB)."""
        return bisect.bisect_right(self.keys, oid)

    def is_known_object(self, oid: tuple[int, ...]) -> bool:
        """True when ``oid`` names an instance-less object we serve (noSuchInstance vs noSuchObject)."""
        if len(oid) < 2:
            return False
        i = bisect.bisect_left(self.keys, oid[:-1])
        return i < len(self.keys) and self.keys[i][: len(oid) - 1] == oid[:-1]
