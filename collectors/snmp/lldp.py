"""LLDP-MIB (IEEE 802.1AB) over SNMP: who is plugged into each port of a switch.

Two tables are read::

    lldpLocPortTable  1.0.8802.1.1.2.1.3.7.1.{2 PortIdSubtype, 3 PortId, 4 PortDesc}.<localPortNum>
    lldpRemTable      1.0.8802.1.1.2.1.4.1.1.{4 ChassisIdSubtype, 5 ChassisId, 6 PortIdSubtype,
                      7 PortId, 8 PortDesc, 9 SysName}.<timeMark>.<localPortNum>.<remIndex>

``localPortNum`` is the agent's own numbering. Many agents (lldpd, most switch OSes) use the
ifIndex; others do not, so a port's name is taken from lldpLocPortTable when it names a port we
know, else from ifName of ``ifIndex = localPortNum``, else whatever lldpLocPortTable says.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from collectors.snmp.subtree import Oid, Varbind, column, walk
from fabricmon.core.topology.cabling import LldpNeighbour
from fabricmon.core.topology.spec import SnmpSettings

LLDP_LOC_PORT_TABLE = (1, 0, 8802, 1, 1, 2, 1, 3, 7, 1)
LLDP_REM_TABLE = (1, 0, 8802, 1, 1, 2, 1, 4, 1, 1)
IF_NAME = (1, 3, 6, 1, 2, 1, 31, 1, 1, 1, 1)
ROOTS: tuple[Oid, ...] = (LLDP_LOC_PORT_TABLE, LLDP_REM_TABLE)

# LldpChassisIdSubtype / LldpPortIdSubtype values whose id is a MAC address (shown as aa:bb:…).
CHASSIS_MAC, PORT_MAC = 4, 3
PORT_NAME_SUBTYPES = (1, 5, 7)  # interfaceAlias, interfaceName, local: a name, not an address


def _text(vb: Varbind | None) -> str:
    return vb.text() if vb is not None else ""


def _id(vb: Varbind | None, subtype: Varbind | None, mac_subtype: int) -> str:
    """An LLDP id as text: a MAC subtype as ``aa:bb:cc:dd:ee:ff``, other binary ids in hex."""
    if vb is None or not isinstance(vb.value, bytes):
        return _text(vb)
    raw = vb.value
    if subtype is not None and subtype.value == mac_subtype and len(raw) == 6:
        return ":".join(f"{b:02x}" for b in raw)
    try:
        return raw.decode("utf-8").strip("\x00").strip()
    except UnicodeDecodeError:
        return raw.hex(":")


def local_port_names(
    rows: Sequence[Varbind], if_names: Mapping[int, str], known_ports: Collection[str] = ()
) -> dict[int, str]:
    """lldpLocPortNum → the switch's port name (see the module docstring for the order)."""
    sub = column(rows, (*LLDP_LOC_PORT_TABLE, 2))
    pid = column(rows, (*LLDP_LOC_PORT_TABLE, 3))
    desc = column(rows, (*LLDP_LOC_PORT_TABLE, 4))
    known = set(known_ports)
    out: dict[int, str] = {}
    for idx in sorted(set(sub) | set(pid) | set(desc) | {(i,) for i in if_names}):
        num = idx[0]
        candidates = [_text(desc.get(idx))]
        if sub.get(idx) is not None and sub[idx].value in PORT_NAME_SUBTYPES:
            candidates.insert(0, _text(pid.get(idx)))
        name = next((c for c in candidates if c and c in known), "")
        out[num] = name or if_names.get(num, "") or next((c for c in candidates if c), "") or str(num)
    return out


def neighbours_from_rows(
    switch: str, rows: Sequence[Varbind], if_names: Mapping[int, str], known_ports: Collection[str] = ()
) -> list[LldpNeighbour]:
    """The walked LLDP-MIB rows of one switch as :class:`LldpNeighbour`, in table order."""
    local = local_port_names(rows, if_names, known_ports)
    cols = {c: column(rows, (*LLDP_REM_TABLE, c)) for c in (4, 5, 6, 7, 8, 9)}
    keys = sorted(set().union(*(set(c) for c in cols.values())))
    out = []
    for idx in keys:
        if len(idx) != 3:  # timeMark.localPortNum.remIndex
            continue
        port_num = idx[1]
        out.append(
            LldpNeighbour(
                switch=switch,
                local_port=local.get(port_num) or if_names.get(port_num, "") or str(port_num),
                system_name=_text(cols[9].get(idx)),
                port_id=_id(cols[7].get(idx), cols[6].get(idx), PORT_MAC),
                port_desc=_text(cols[8].get(idx)),
                chassis_id=_id(cols[5].get(idx), cols[4].get(idx), CHASSIS_MAC),
            )
        )
    return out


async def read_neighbours(
    switch: str, address: str, settings: SnmpSettings, known_ports: Collection[str] = ()
) -> list[LldpNeighbour]:
    """Walk one switch's LLDP-MIB (and ifName, to name its ports); raises only SnmpPollError."""
    walked = await walk(switch, address, settings, (*ROOTS, IF_NAME))
    if_names = {k[0]: vb.text() for k, vb in column(walked[IF_NAME], IF_NAME).items() if len(k) == 1}
    rows = walked[LLDP_LOC_PORT_TABLE] + walked[LLDP_REM_TABLE]
    return neighbours_from_rows(switch, rows, if_names, known_ports)
