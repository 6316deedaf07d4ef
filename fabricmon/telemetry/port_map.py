"""Which ifIndex each of a switch's ports has *now*: the topology's, re-mapped by ifName.

A reboot (or a line card inserted) may renumber ifIndex: the topology's ``Ethernet7`` at ifIndex 7
is then at 23, and differencing "ifIndex 7" across the reboot would mix two ports' counters. The
collector reads the agent's ifName column (else ifDescr; a rare walk, :meth:`SnmpPoller.names`)
and re-maps::

    first poll of a lease ─┐
    sysUpTime went back ───┼─▶ read ifName ─▶ ifindex_by_name(topology ifIndex, names, ifName)
    ifIndex set changed ───┤                    └─▶ the ifIndex per port the reads are aligned to
    every NAMES_REFRESH_S ─┘

After a restart or a changed ifIndex set the walk runs before that poll is aligned (its sample is
dropped anyway); otherwise it runs beside the polls and applies from the next one, so a new lease
holder's first poll (a takeover must not lose a tick) waits for nothing: it starts from the
mapping its predecessor left in the switch's health. An agent that serves no ifName (or whose
names match none of the topology's) keeps the topology's ifIndex. A failed ifName walk keeps the
current mapping and is tried again after NAMES_RETRY_S.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from collectors.snmp.slices import ifindex_by_name
from fabricmon.core.topology.spec import SwitchSpec

log = logging.getLogger(__name__)

NamesFn = Callable[[SwitchSpec], Awaitable[Mapping[int, str]]]  # ifIndex → ifName; raises SnmpPollError
NAMES_REFRESH_S = 300.0  # a renumbering without a restart or a changed ifIndex set is seen this late
NAMES_RETRY_S = 30.0


class PortMap:
    """The ifIndex per port (port order of the switch's slice of the port index) for one switch."""

    def __init__(self, fabric: str, sw: SwitchSpec, ifindex: npt.ArrayLike, names: Sequence[str], *,
                 read_names: NamesFn | None, old_health: Mapping[str, Any] | None = None) -> None:
        self.fabric, self.sw, self.read_names = fabric, sw, read_names
        self.configured = np.asarray(ifindex, dtype=np.int32)
        self.names = list(names)
        self.ifindex = self.configured.copy()
        self.moved: dict[str, tuple[int, int]] = {}
        self.names_read_ns: int | None = None
        self.last_error = ""
        self._due_ns = 0  # read names at the next poll
        self._uptime: int | None = None
        self._ifset: npt.NDArray[np.int32] | None = None
        self._background: asyncio.Task[None] | None = None
        self._changed = np.zeros(len(self.configured), dtype=bool)
        position = {n: k for k, n in enumerate(self.names)}
        for name, pair in dict((old_health or {}).get("ports_remapped") or {}).items():
            if name in position and isinstance(pair, list) and len(pair) == 2:
                self.ifindex[position[name]] = int(pair[1])  # the predecessor's mapping
                self.moved[name] = (int(pair[0]), int(pair[1]))

    def seed(self, last_uptime_ticks: int | None) -> None:
        """The sysUpTime of the last read (the predecessor's, at a takeover): a restart since then
        is then seen by this holder's first poll too."""
        self._uptime = last_uptime_ticks

    async def update(self, snapshot: Any) -> None:
        """Look at a fresh snapshot (``collectors.snmp.IfSnapshot``) and re-map if its agent may have
        renumbered. Never raises for an SNMP failure: the mapping then stays as it was."""
        now = time.time_ns()
        uptime = snapshot.sys_uptime_ticks
        ifset = np.asarray(snapshot.ifindex, dtype=np.int32)
        restarted = uptime is not None and self._uptime is not None and uptime < self._uptime
        changed = self._ifset is not None and not np.array_equal(ifset, self._ifset)
        self._uptime, self._ifset = uptime, ifset
        if self.read_names is None or not (restarted or changed or now >= self._due_ns):
            return
        if restarted or changed:
            await self._read(now, "agent restarted" if restarted else "ifIndex set changed")
        elif self._background is None or self._background.done():
            self._due_ns = now + round(NAMES_RETRY_S * 1e9)  # not again while this one runs
            self._background = asyncio.create_task(self._read(now, "ifName read"))

    def stop(self) -> None:
        if self._background is not None:
            self._background.cancel()

    async def _read(self, now: int, why: str) -> None:
        assert self.read_names is not None
        try:
            agent_names = await self.read_names(self.sw)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # SnmpPollError or worse: a mapping problem must not fail the poll
            self.last_error = f"ifName walk failed: {getattr(exc, 'message', exc)}"[:300]
            self._due_ns = now + round(NAMES_RETRY_S * 1e9)
            log.warning("switch %s: %s", self.sw.name, self.last_error,
                        extra={"fabric": self.fabric, "switch": self.sw.name, "event": "ifname_failed"})
            return
        self.last_error = ""
        self.names_read_ns = now
        self._due_ns = now + round(NAMES_REFRESH_S * 1e9)
        ifindex, moved = ifindex_by_name(self.configured, self.names, agent_names)
        if not np.array_equal(ifindex, self.ifindex):
            log.warning(
                "switch %s: ports re-mapped by ifName (%s): %s", self.sw.name, why,
                ", ".join(f"{n} {a}→{b}" for n, (a, b) in sorted(moved.items())) or "back to the topology's",
                extra={"fabric": self.fabric, "switch": self.sw.name, "event": "ifindex_remapped",
                       "moved": {n: list(v) for n, v in moved.items()}, "why": why},
            )  # fmt: skip
        self._changed |= ifindex != self.ifindex
        self.ifindex, self.moved = ifindex, moved

    def take_changed(self) -> npt.NDArray[np.bool_]:
        """Ports whose ifIndex changed since the last call: their previous read is another port's."""
        out, self._changed = self._changed, np.zeros(len(self.configured), dtype=bool)
        return out

    def health(self) -> dict[str, Any]:
        """What the switch's health says about the mapping (bounded: only moved ports)."""
        return {"ports_remapped": {n: list(v) for n, v in self.moved.items()},
                "ifnames_read_ns": self.names_read_ns, "ifname_error": self.last_error}
