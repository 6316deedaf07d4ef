"""Discovery verbs: walk a switch, diff what it reports against its stored ports (by name), apply.

::

    discover_switch(fabric, switch)            SNMP walk (collectors/snmp/discovery.py)
        └─ diff_ports(stored ports, inventory) ─▶ PortDiff: add / renumber / speed / missing
    … apply=True ─▶ the fabric's spec with the switch's ports merged ─▶ import_fabric (one
                    transaction, a new topology version; NICs and links stay on their ports by name)

Ports are matched by **name** (ifName), never by ifIndex: a reboot that renumbers ifIndex is a
``renumber`` of the same port, not a removal and an addition. Interfaces that carry no fabric
traffic (loopbacks, VLAN interfaces, tunnels …) are listed as skipped unless ``all_types``. A
stored port the switch no longer reports is ``missing``: kept unless ``prune`` (removing it
uncables its NIC or link, which the diff says).
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from typing import Literal

from collectors.snmp import close_loop_context
from collectors.snmp.discovery import DiscoveredInterface, SwitchInventory, discover
from fabricmon.core.topology.cabling import short_name
from fabricmon.core.topology.spec import FabricSpec, Facing, PortSpec, SwitchSpec
from fabricmon.topology.models import Fabric, Switch
from fabricmon.topology.services import fabric_spec, import_fabric

Action = Literal["add", "renumber", "speed", "missing"]


class DiscoveryError(ValueError):
    """Discovery cannot be applied as asked (the message says why and what to do)."""


@dataclass(frozen=True)
class PortChange:
    """One line of the diff for one port, by name."""

    action: Action
    name: str
    ifindex: int  # on the switch (missing: the stored one)
    old_ifindex: int | None = None
    speed_bps: int = 0
    old_speed_bps: int | None = None
    facing: Facing = "host"
    note: str = ""  # what else the switch says about a new port: alias, oper status, LLDP neighbour

    def __str__(self) -> str:
        if self.action == "add":
            line = f"+ {self.name}: ifIndex {self.ifindex}, {_speed(self.speed_bps)}, {self.facing}-facing"
            return f"{line} ({self.note})" if self.note else line
        if self.action == "renumber":
            return f"~ {self.name}: ifIndex {self.old_ifindex} → {self.ifindex}"
        if self.action == "speed":
            return f"~ {self.name}: speed {_speed(self.old_speed_bps or 0)} → {_speed(self.speed_bps)}"
        return f"- {self.name}: ifIndex {self.ifindex}, stored but not reported by the switch"


@dataclass(frozen=True)
class PortDiff:
    """Everything discovery would change on one switch, and what it saw but leaves alone."""

    fabric: str
    switch: str
    sys_name: str
    sys_descr: str
    changes: tuple[PortChange, ...]
    skipped: tuple[DiscoveredInterface, ...] = ()
    warnings: tuple[str, ...] = ()
    neighbours: int = 0
    applied: bool = False
    removed: tuple[str, ...] = field(default=())  # with prune: the ports deleted

    def lines(self) -> list[str]:
        head = f"{self.fabric}/{self.switch}: sysName {self.sys_name or '?'!s}"
        head += f" ({self.sys_descr.splitlines()[0]})" if self.sys_descr else ""
        out = [head, *[f"warning: {w}" for w in self.warnings]]
        out += [str(c) for c in self.changes] or ["no port changes"]
        if self.skipped:
            out.append(
                f"skipped {len(self.skipped)} interface(s) that carry no fabric traffic: "
                + ", ".join(f"{i.name} (ifType {i.if_type})" for i in self.skipped[:12])
                + (" …" if len(self.skipped) > 12 else "")
            )
        out.append(f"LLDP: {self.neighbours} neighbour(s)")
        if self.applied:
            out.append("applied" + (f"; removed {', '.join(self.removed)}" if self.removed else ""))
        else:
            out.append("dry run: nothing changed (apply to store it)")
        return out


def _speed(bps: int) -> str:
    return f"{bps / 1e9:g} Gb/s" if bps else "speed unknown"


def diff_ports(
    fabric: str,
    sw: SwitchSpec,
    inv: SwitchInventory,
    *,
    all_types: bool = False,
    switch_names: Collection[str] = (),
) -> PortDiff:
    """Compare the switch's stored ports with what it reported (pure: no database, no network).
    A new port whose LLDP neighbour is one of ``switch_names`` is fabric-facing."""
    stored = {p.name: p for p in sw.ports}
    peers = {short_name(s) for s in switch_names}
    neighbour_of = {n.local_port: n.label() for n in inv.neighbours}
    seen_switches = {
        n.local_port for n in inv.neighbours if n.system_name and short_name(n.system_name) in peers
    }
    changes: list[PortChange] = []
    skipped: list[DiscoveredInterface] = []
    warnings: list[str] = []
    if inv.sys_name and inv.sys_name.split(".", 1)[0].lower() != sw.name.split(".", 1)[0].lower():
        warnings.append(
            f"the agent at {sw.mgmt_address}:{sw.snmp.port} calls itself {inv.sys_name!r}, "
            f"not {sw.name!r}: is it the right switch?"
        )
    reported: set[str] = set()
    for i in inv.interfaces:
        if not (all_types or i.carries_fabric_traffic or i.name in stored):
            skipped.append(i)
            continue
        if i.name in reported:
            warnings.append(f"ifIndex {i.ifindex}: name {i.name!r} reported twice; kept the first")
            continue
        reported.add(i.name)
        old = stored.get(i.name)
        if old is None:
            if not i.speed_bps:
                warnings.append(f"{i.name} (ifIndex {i.ifindex}): no speed reported; not proposed")
                continue
            facing: Facing = "fabric" if (i.name in seen_switches or sw.role == "spine") else "host"
            changes.append(PortChange("add", i.name, i.ifindex, speed_bps=i.speed_bps, facing=facing,
                                      note=_note(i, neighbour_of.get(i.name, ""))))  # fmt: skip
            continue
        if old.ifindex != i.ifindex:
            changes.append(PortChange("renumber", i.name, i.ifindex, old_ifindex=old.ifindex))
        if i.speed_bps and i.speed_bps != old.speed_bps:
            changes.append(
                PortChange("speed", i.name, i.ifindex, speed_bps=i.speed_bps, old_speed_bps=old.speed_bps)
            )
    for p in sw.ports:
        if p.name not in reported:
            changes.append(PortChange("missing", p.name, p.ifindex, speed_bps=p.speed_bps))
    return PortDiff(
        fabric,
        sw.name,
        inv.sys_name,
        inv.sys_descr,
        tuple(changes),
        tuple(skipped),
        tuple(warnings),
        len(inv.neighbours),
    )


def _note(i: DiscoveredInterface, neighbour: str) -> str:
    parts = [f"alias {i.alias!r}"] if i.alias else []
    parts += [] if i.oper_up else ["oper down"]
    parts += [f"LLDP: {neighbour}"] if neighbour else []
    return ", ".join(parts)


def merged_spec(
    spec: FabricSpec, diff: PortDiff, *, prune: bool = False
) -> tuple[FabricSpec, tuple[str, ...]]:
    """``spec`` with ``diff`` applied to its switch; returns it and the ports pruned."""
    sw = spec.switch(diff.switch)
    ports = {p.name: p for p in sw.ports}
    removed: list[str] = []
    for c in diff.changes:
        if c.action == "add":
            ports[c.name] = PortSpec(ifindex=c.ifindex, name=c.name, speed_bps=c.speed_bps, facing=c.facing)
        elif c.action == "renumber":
            ports[c.name] = replace(ports[c.name], ifindex=c.ifindex)
        elif c.action == "speed":
            ports[c.name] = replace(ports[c.name], speed_bps=c.speed_bps)
        elif c.action == "missing" and prune:
            del ports[c.name]
            removed.append(c.name)
    by_ifindex: dict[int, str] = {}
    for p in ports.values():
        if p.ifindex in by_ifindex:
            raise DiscoveryError(
                f"{sw.name}: ifIndex {p.ifindex} would be both {by_ifindex[p.ifindex]} and {p.name} "
                f"(a stored port the switch no longer reports holds it): prune the missing ports"
            )
        by_ifindex[p.ifindex] = p.name
    gone = set(removed)
    hosts = tuple(
        replace(
            h,
            gpus=tuple(
                replace(g, switch="", port="") if (g.switch == sw.name and g.port in gone) else g
                for g in h.gpus
            ),
        )
        for h in spec.hosts
    )
    links = tuple(
        ln
        for ln in spec.links
        if not (
            (ln.a_switch == sw.name and ln.a_port in gone) or (ln.b_switch == sw.name and ln.b_port in gone)
        )
    )
    new_sw = replace(sw, ports=tuple(sorted(ports.values(), key=lambda p: p.ifindex)))
    switches = tuple(new_sw if s.name == sw.name else s for s in spec.switches)
    return replace(spec, switches=switches, hosts=hosts, links=links), tuple(removed)


def walk_switch(sw: SwitchSpec) -> SwitchInventory:
    """Run the SNMP walk of one switch (its own event loop; sockets closed after)."""

    async def run() -> SwitchInventory:
        try:
            return await discover(sw.name, sw.mgmt_address, sw.snmp)
        finally:
            close_loop_context()

    return asyncio.run(run())


def discover_switch(
    fabric: Fabric | str, switch: str, *, apply: bool = False, prune: bool = False, all_types: bool = False,
    new: SwitchSpec | None = None,
) -> PortDiff:  # fmt: skip
    """Walk ``switch`` of ``fabric`` and return the diff; with ``apply`` store it (a new topology
    version). A switch the fabric does not have yet is walked and added as ``new`` says (its name,
    role, rail, address and SNMP settings; no ports). Raises ``Switch.DoesNotExist`` (unknown and
    no ``new``), :class:`DiscoveryError` or ``SnmpPollError``."""
    fabric_row = fabric if isinstance(fabric, Fabric) else Fabric.objects.get(name=fabric)
    spec = fabric_spec(fabric_row)
    known = {s.name for s in spec.switches}
    if switch in known:
        if new is not None:
            raise DiscoveryError(f"{fabric_row.name} already has a switch {switch!r} (drop --address)")
        sw = spec.switch(switch)
    elif new is None:
        raise Switch.DoesNotExist(f"fabric {fabric_row.name!r} has no switch {switch!r}")
    else:
        sw = replace(new, name=switch, ports=())
        spec = replace(spec, switches=(*spec.switches, sw))
    diff = diff_ports(fabric_row.name, sw, walk_switch(sw), all_types=all_types, switch_names=known)
    if not apply:
        return diff
    new_spec, removed = merged_spec(spec, diff, prune=prune)
    if switch not in known or new_spec != spec:
        import_fabric(new_spec)
    return replace(diff, applied=True, removed=removed)
