"""The rail-plan check against the cabling the switches see: read every switch's LLDP neighbours,
compare them with the stored topology (``core.topology.cabling.compare_cabling``).

::

    check_cabling(fabric)
      ├─ per switch, concurrently: gNMI Get of OpenConfig LLDP (collector gnmi/both with a target)
      │                            or an SNMP walk of LLDP-MIB (every other switch)
      └─ compare_cabling(stored spec, neighbours, switches that answered) ─▶ CablingCheck

A switch whose read fails is named in ``errors`` and judged silent (its declared peers are not
reported unseen): a walk that failed says nothing about the cables.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import grpc
from django.conf import settings

from collectors.gnmi import lldp as gnmi_lldp
from collectors.snmp import SnmpPollError, close_loop_context
from collectors.snmp import lldp as snmp_lldp
from fabricmon.core.topology.cabling import CablingReport, LldpNeighbour, compare_cabling
from fabricmon.core.topology.spec import SwitchSpec
from fabricmon.topology.models import Fabric
from fabricmon.topology.services import collector_protocols, fabric_spec


@dataclass(frozen=True)
class CablingCheck:
    """One check of one fabric: the comparison and the switches that could not be read (and why)."""

    fabric: str
    report: CablingReport
    errors: dict[str, str] = field(default_factory=dict)

    def lines(self) -> list[str]:
        r = self.report
        out = [str(f) for f in r.violations]
        out += [f"unseen: {f}" for f in r.unseen]
        out += [f"{sw}: LLDP not read: {why}" for sw, why in sorted(self.errors.items())]
        silent = [sw for sw in r.silent_switches if sw not in self.errors]
        if silent:
            out.append(f"no LLDP neighbours reported by: {', '.join(silent)}")
        out.append(
            f"{self.fabric}: {r.neighbours} LLDP neighbour(s), {r.matched} as declared, "
            f"{len(r.violations)} violation(s), {len(r.unseen)} declared peer(s) not seen"
        )
        return out


async def _read(sw: SwitchSpec, protocol: str) -> list[LldpNeighbour]:
    if protocol in ("gnmi", "both") and sw.gnmi is not None:
        return await gnmi_lldp.read_neighbours(sw.name, sw.mgmt_address, sw.gnmi.port)
    return await snmp_lldp.read_neighbours(sw.name, sw.mgmt_address, sw.snmp, [p.name for p in sw.ports])


async def _read_all(switches: tuple[SwitchSpec, ...], protocols: dict[str, str], *,
                    reads_per_s: float, concurrency: int) -> list[object]:
    """Every switch's neighbours, reads started at most ``reads_per_s`` a second and at most
    ``concurrency`` at once. All at once, a 184-switch fabric's check opened 184 gNMI channels
    in one go every minute: 5-7 s of CPU in a burst on the evaluation worker and on the switches'
    side (the twin's telemetry streams stalled 2-6 s each time; a real switch's control plane
    answers its telemetry subscriptions with the same CPU), and reads timed out. Paced by starts,
    not by a small bound on reads in flight: a busy switch answers a Get in seconds, and 8 at a
    time made the check outlast its interval."""
    gate = asyncio.Semaphore(max(1, concurrency))
    gap_s = 1.0 / reads_per_s if reads_per_s > 0 else 0.0

    async def paced(i: int, sw: SwitchSpec) -> list[LldpNeighbour]:
        await asyncio.sleep(i * gap_s)
        async with gate:
            return await _read(sw, protocols.get(sw.name, "snmp"))

    try:
        return await asyncio.gather(*(paced(i, sw) for i, sw in enumerate(switches)),
                                    return_exceptions=True)  # fmt: skip
    finally:
        close_loop_context()


def check_cabling(fabric: Fabric | str) -> CablingCheck:
    """Read every switch's LLDP neighbours and compare them with the stored topology."""
    spec = fabric_spec(fabric)
    protocols = collector_protocols(spec.name)
    results = asyncio.run(_read_all(spec.switches, protocols,
                                    reads_per_s=settings.FABRICMON_CABLING_READS_PER_S,
                                    concurrency=settings.FABRICMON_CABLING_CONCURRENCY))
    neighbours: list[LldpNeighbour] = []
    errors: dict[str, str] = {}
    for sw, got in zip(spec.switches, results, strict=True):
        if isinstance(got, SnmpPollError):
            errors[sw.name] = str(got)
        elif isinstance(got, grpc.aio.AioRpcError):
            errors[sw.name] = f"gNMI {got.code().name}: {got.details()}"
        elif isinstance(got, BaseException):
            raise got
        elif isinstance(got, list):
            neighbours.extend(got)
    # a switch that answered with no neighbour at all (LLDP off) is judged silent, like a failed one
    return CablingCheck(spec.name, compare_cabling(spec, neighbours), errors)
