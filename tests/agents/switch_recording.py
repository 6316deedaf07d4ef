"""Switch recordings for snmpd: a system group, IF-MIB ifTable/ifXTable with names, types and
speeds, and an LLDP-MIB, written as cells for :mod:`pass_persist_cells` and served by a real
``snmpd`` (the host's own system, interfaces and LLDP handlers switched off)::

    snmpd ── pass_persist 1.3.6.1.2.1.1        system    ─┐
          ── pass_persist 1.3.6.1.2.1.2.2.1    ifTable    ├─ pass_persist_cells.py ── cells.json
          ── pass_persist 1.3.6.1.2.1.31.1.1.1 ifXTable   │   (rewrite it to re-cable or renumber
          ── pass_persist 1.0.8802.1.1.2.1     LLDP-MIB  ─┘    the running agent)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.agents.netsnmp import Snmpd, V3User, start_snmpd

CELLS_SCRIPT = Path(__file__).with_name("pass_persist_cells.py")
ROOTS = ("1.3.6.1.2.1.1", "1.3.6.1.2.1.2.2.1", "1.3.6.1.2.1.31.1.1.1", "1.0.8802.1.1.2.1")
IFT, IFX = "1.3.6.1.2.1.2.2.1", "1.3.6.1.2.1.31.1.1.1"
LOC_PORT, REM = "1.0.8802.1.1.2.1.3.7.1", "1.0.8802.1.1.2.1.4.1.1"


@dataclass(frozen=True)
class RecordedPort:
    """One interface of a recorded switch."""

    ifindex: int
    name: str
    if_type: int = 6  # ethernetCsmacd
    speed_bps: int = 400_000_000_000
    oper_status: int = 1
    alias: str = ""


@dataclass(frozen=True)
class RecordedNeighbour:
    """One LLDP remote row: on local port ``ifindex``, ``system_name`` port ``port_id``."""

    ifindex: int
    system_name: str
    port_id: str
    port_desc: str = ""
    chassis_mac: str = "02 00 00 00 00 01"


Cell = list[str]


def switch_cells(
    sys_name: str, ports: Sequence[RecordedPort], neighbours: Sequence[RecordedNeighbour] = (), *,
    if_x_table: bool = True, high_speed: bool = True, sys_descr: str = "Recorded switch OS 4.2",
) -> list[Cell]:  # fmt: skip
    """The cells of one switch. Without ``if_x_table`` (a 32-bit-only agent) names come from
    ifDescr only; without ``high_speed`` there is no ifHighSpeed."""
    cells: list[Cell] = [
        ["1.3.6.1.2.1.1.1.0", "string", sys_descr],
        ["1.3.6.1.2.1.1.5.0", "string", sys_name],
    ]
    for p in ports:
        i = p.ifindex
        cells += [
            [f"{IFT}.1.{i}", "integer", str(i)],
            [f"{IFT}.2.{i}", "string", p.name],
            [f"{IFT}.3.{i}", "integer", str(p.if_type)],
            [f"{IFT}.5.{i}", "gauge", str(min(p.speed_bps, 2**32 - 1))],
            [f"{IFT}.8.{i}", "integer", str(p.oper_status)],
        ]
        if if_x_table:
            cells += [[f"{IFX}.1.{i}", "string", p.name], [f"{IFX}.18.{i}", "string", p.alias]]
            if high_speed:
                cells.append([f"{IFX}.15.{i}", "gauge", str(p.speed_bps // 1_000_000)])
        cells += [  # lldpLocPortTable: port number = ifIndex, id = MAC (as many agents do), desc = name
            [f"{LOC_PORT}.2.{i}", "integer", "3"],
            [f"{LOC_PORT}.3.{i}", "octet", f"02 00 00 00 01 {i % 256:02x}"],
            [f"{LOC_PORT}.4.{i}", "string", p.name],
        ]
    for k, n in enumerate(neighbours, start=1):
        idx = f"0.{n.ifindex}.{k}"
        cells += [
            [f"{REM}.4.{idx}", "integer", "4"],  # chassis id subtype macAddress
            [f"{REM}.5.{idx}", "octet", n.chassis_mac],
            [f"{REM}.6.{idx}", "integer", "5"],  # port id subtype interfaceName
            [f"{REM}.7.{idx}", "string", n.port_id],
            [f"{REM}.8.{idx}", "string", n.port_desc],
            [f"{REM}.9.{idx}", "string", n.system_name],
        ]
    return cells


def write_cells(path: Path, cells: list[Cell]) -> None:
    """Atomically replace the recording a running agent serves (read on its next request)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(cells))
    tmp.replace(path)


def start_recorded_snmpd(
    workdir: Path, cells: list[Cell], *, community: str = "public", v3_users: tuple[V3User, ...] = ()
) -> tuple[Snmpd, Path]:
    """snmpd serving ``cells``; returns it and the cells file (rewrite with :func:`write_cells`)."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "cells.json"
    write_cells(path, cells)
    lines = tuple(f"pass_persist -p 1 .{root} {sys.executable} {CELLS_SCRIPT} --root {root} --cells {path}"
                  for root in ROOTS)  # fmt: skip
    agent = start_snmpd(workdir, community=community, v3_users=v3_users, extra_config=lines,
                        extra_args=("-I", "-system_mib,sysORTable,ifTable,ifXTable,interface"))  # fmt: skip
    return agent, path
