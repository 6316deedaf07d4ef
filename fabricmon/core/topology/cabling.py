"""Cabling truth: the declared topology against the LLDP neighbours the switches report (pure).

Each switch port reports at most a few LLDP neighbours (system name, port id/description); the
declared topology says what its cable should end on::

    declared   [leaf-r1:Ethernet2] ════ node02 gpu1 mlx5_1
    reported   [leaf-r0:Ethernet3] ──── sysName node02, port mlx5_1      ← NIC of rail 1 on rail 0

Every reported neighbour is judged exactly once:

* it is what the topology declares on that port → fine;
* it is a declared NIC (host + NIC name) on a *leaf of another rail* (or a spine) → ``wrong_rail``;
* anything else (a NIC on the right rail but another port, an unknown system, a switch-to-switch
  cable that is not the declared one) → ``unexpected``.

A declared peer that no switch reports anywhere is ``unseen`` — informational only (a host that is
powered off or runs no LLDP agent looks the same), and never listed for a switch that reported no
neighbours at all (LLDP off there, or its walk failed: ``silent_switches``). A NIC found elsewhere
is not also reported unseen: one mis-cabled link is one finding.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from fabricmon.core.topology.spec import FabricSpec


@dataclass(frozen=True)
class LldpNeighbour:
    """One row of a switch's LLDP remote table: what is plugged into ``switch:local_port``."""

    switch: str
    local_port: str  # the switch's own port name (ifName / lldpLocPortId)
    system_name: str = ""
    port_id: str = ""
    port_desc: str = ""
    chassis_id: str = ""

    def label(self) -> str:
        port = self.port_id or self.port_desc or "?"
        return f"{self.system_name or self.chassis_id or '?'} port {port}"


FindingKind = Literal["wrong_rail", "unexpected", "unseen"]


@dataclass(frozen=True)
class CablingFinding:
    """One difference between the declared cabling and what LLDP reports."""

    kind: FindingKind
    switch: str  # where the neighbour was seen (wrong_rail/unexpected) or declared (unseen)
    port: str
    seen: str  # what LLDP reports there ("" for unseen)
    declared: str  # what the topology declares there ("" when nothing)
    host: str = ""  # the NIC concerned, when the neighbour is a declared NIC
    nic: str = ""
    rail: int | None = None  # the NIC's rail
    switch_rail: int | None = None  # the rail of the switch it was seen on (None: a spine)

    @property
    def key(self) -> str:
        """Scope of an alert: the NIC when it is one, else the port the neighbour was seen on."""
        return f"{self.host}:{self.nic}" if self.host else f"{self.switch}:{self.port}"

    def __str__(self) -> str:
        at = f"{self.switch}:{self.port}"
        if self.kind == "wrong_rail":
            where = f"rail {self.switch_rail}" if self.switch_rail is not None else "no rail (a spine)"
            return (
                f"{self.host} {self.nic} (rail {self.rail}) is cabled to {at}, which serves {where}"
                f"{'; declared there: ' + self.declared if self.declared else ''}"
            )
        if self.kind == "unexpected":
            return f"{at}: LLDP sees {self.seen}, declared {self.declared or 'nothing'}"
        return f"{at}: declared {self.declared}, not seen by any switch"


@dataclass(frozen=True)
class CablingReport:
    """The whole comparison: violations (wrong rail, unexpected) and what was not seen."""

    findings: tuple[CablingFinding, ...]
    neighbours: int
    matched: int
    silent_switches: tuple[str, ...] = field(default=())

    @property
    def violations(self) -> tuple[CablingFinding, ...]:
        return tuple(f for f in self.findings if f.kind != "unseen")

    @property
    def unseen(self) -> tuple[CablingFinding, ...]:
        return tuple(f for f in self.findings if f.kind == "unseen")


@dataclass(frozen=True)
class _Nic:
    host: str
    nic: str
    rail: int
    switch: str
    port: str

    def label(self) -> str:
        return f"{self.host} {self.nic}"


def short_name(name: str) -> str:
    """``node02.cluster.local`` → ``node02``: LLDP system names are often FQDNs."""
    return name.strip().split(".", 1)[0].lower()


def _port_names(n: LldpNeighbour) -> set[str]:
    return {p.strip().lower() for p in (n.port_id, n.port_desc) if p.strip()}


def compare_cabling(
    spec: FabricSpec, neighbours: Iterable[LldpNeighbour], switches_reporting: Sequence[str] | None = None
) -> CablingReport:
    """Compare ``spec`` with the reported ``neighbours``. ``switches_reporting`` names the switches
    whose LLDP tables were read (default: those with at least one neighbour); declared peers on the
    others are not judged unseen."""
    seen = list(neighbours)
    reporting = set(switches_reporting if switches_reporting is not None else (n.switch for n in seen))
    nics = [_Nic(h.name, g.nic, g.rail, g.switch, g.port) for h in spec.hosts for g in h.gpus]
    nic_by_name: dict[tuple[str, str], _Nic] = {(short_name(n.host), n.nic.lower()): n for n in nics}
    nic_at = {(n.switch, n.port): n for n in nics if n.switch}
    link_at: dict[tuple[str, str], tuple[str, str]] = {}
    for ln in spec.links:
        link_at[ln.a_switch, ln.a_port] = (ln.b_switch, ln.b_port)
        link_at[ln.b_switch, ln.b_port] = (ln.a_switch, ln.a_port)
    rail_of = {sw.name: (sw.rail if sw.role == "leaf" else None) for sw in spec.switches}
    switch_by_short = {short_name(sw.name): sw.name for sw in spec.switches}
    found: list[CablingFinding] = []
    located: set[tuple[str, str]] = set()  # declared ends (switch, port) whose peer was seen somewhere
    matched = 0
    for nb in seen:
        here = (nb.switch, nb.local_port)
        declared = _declared_label(nic_at.get(here), link_at.get(here))
        host_nic = next((nic_by_name[k] for k in _nic_keys(nb) if k in nic_by_name), None)
        if host_nic is not None:
            located.add((host_nic.switch, host_nic.port))
            if (host_nic.switch, host_nic.port) == here:
                matched += 1
                continue
            sw_rail = rail_of.get(nb.switch)
            kind: FindingKind = "wrong_rail" if sw_rail != host_nic.rail else "unexpected"
            found.append(
                CablingFinding(
                    kind,
                    nb.switch,
                    nb.local_port,
                    nb.label(),
                    declared,
                    host=host_nic.host,
                    nic=host_nic.nic,
                    rail=host_nic.rail,
                    switch_rail=sw_rail,
                )
            )
            continue
        peer_switch = switch_by_short.get(short_name(nb.system_name)) if nb.system_name else None
        if peer_switch is not None:
            far = link_at.get(here)
            if far is not None and far[0] == peer_switch and far[1].lower() in _port_names(nb):
                matched += 1
                located.add(here)
                continue
        found.append(
            CablingFinding(
                "unexpected",
                nb.switch,
                nb.local_port,
                nb.label(),
                declared,
                switch_rail=rail_of.get(nb.switch),
            )
        )
    for (sw, port), nic in sorted(nic_at.items()):
        if sw in reporting and (sw, port) not in located:
            found.append(
                CablingFinding(
                    "unseen",
                    sw,
                    port,
                    "",
                    nic.label(),
                    host=nic.host,
                    nic=nic.nic,
                    rail=nic.rail,
                    switch_rail=rail_of.get(sw),
                )
            )
    for ln in spec.links:  # one finding per cable, at an end whose switch reported
        a, b = (ln.a_switch, ln.a_port), (ln.b_switch, ln.b_port)
        if a in located or b in located:
            continue
        end, far = (a, b) if ln.a_switch in reporting else (b, a)
        if end[0] in reporting:
            found.append(
                CablingFinding(
                    "unseen", end[0], end[1], "", f"{far[0]}:{far[1]}", switch_rail=rail_of.get(end[0])
                )
            )
    silent = tuple(sorted(sw.name for sw in spec.switches if sw.name not in reporting))
    return CablingReport(tuple(found), len(seen), matched, silent)


def _nic_keys(nb: LldpNeighbour) -> list[tuple[str, str]]:
    host = short_name(nb.system_name)
    return [(host, p) for p in _port_names(nb)] if host else []


def _declared_label(nic: _Nic | None, link: tuple[str, str] | None) -> str:
    if nic is not None:
        return nic.label()
    return f"{link[0]}:{link[1]}" if link is not None else ""


def declared_neighbours(spec: FabricSpec) -> list[LldpNeighbour]:
    """What every switch would report if the cabling were as declared (hosts and switches sending
    their name as LLDP system name and the NIC / port name as port id): the twin serves these."""
    out = [
        LldpNeighbour(g.switch, g.port, system_name=h.name, port_id=g.nic, port_desc=g.nic)
        for h in spec.hosts
        for g in h.gpus
        if g.switch
    ]
    for ln in spec.links:
        out.append(
            LldpNeighbour(
                ln.a_switch, ln.a_port, system_name=ln.b_switch, port_id=ln.b_port, port_desc=ln.b_port
            )
        )
        out.append(
            LldpNeighbour(
                ln.b_switch, ln.b_port, system_name=ln.a_switch, port_id=ln.a_port, port_desc=ln.a_port
            )
        )
    return out
