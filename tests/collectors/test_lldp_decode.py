"""LLDP decoding, pure: LLDP-MIB rows → neighbours (how a local port gets its name), and the
OpenConfig LLDP Get answer in both encodings a device may use."""

from __future__ import annotations

import json

from pygnmi.spec.v080 import gnmi_pb2 as pb

from collectors.gnmi.lldp import neighbour_notification, neighbours_from_notifications, state_path
from collectors.snmp.lldp import LLDP_LOC_PORT_TABLE, LLDP_REM_TABLE, local_port_names, neighbours_from_rows
from collectors.snmp.subtree import Varbind
from fabricmon.core.topology.cabling import LldpNeighbour

INT, STR = 0x02, 0x04


def _loc(num: int, subtype: int, pid: bytes, desc: bytes) -> list[Varbind]:
    return [Varbind((*LLDP_LOC_PORT_TABLE, 2, num), INT, subtype),
            Varbind((*LLDP_LOC_PORT_TABLE, 3, num), STR, pid),
            Varbind((*LLDP_LOC_PORT_TABLE, 4, num), STR, desc)]  # fmt: skip


def test_local_port_name_prefers_a_known_name_then_ifname_then_the_table() -> None:
    rows = [
        *_loc(7, 5, b"Ethernet7", b"to node1"),  # interfaceName subtype: its id names the port
        *_loc(8, 3, b"\x02\x00\x00\x00\x00\x08", b"Ethernet8"),  # MAC id: the description does
        *_loc(9, 3, b"\x02\x00\x00\x00\x00\x09", b"uplink to spine"),  # neither is a port we know
        *_loc(10, 7, b"local-10", b""),
    ]
    names = local_port_names(rows, {9: "Ethernet9", 1009: "mgmt0"}, known_ports={"Ethernet7", "Ethernet8"})
    assert (names[7], names[8], names[9], names[10]) == ("Ethernet7", "Ethernet8", "Ethernet9", "local-10")


def test_remote_rows_mac_ids_and_odd_indexes() -> None:
    idx = (0, 7, 1)
    rows = [
        *_loc(7, 5, b"Ethernet7", b""),
        Varbind((*LLDP_REM_TABLE, 4, *idx), INT, 4),
        Varbind((*LLDP_REM_TABLE, 5, *idx), STR, b"\xaa\xbb\xcc\x00\x11\x22"),
        Varbind((*LLDP_REM_TABLE, 6, *idx), INT, 3),
        Varbind((*LLDP_REM_TABLE, 7, *idx), STR, b"\xaa\xbb\xcc\x00\x11\x23"),
        Varbind((*LLDP_REM_TABLE, 8, *idx), STR, b"mlx5_0\x00"),
        Varbind((*LLDP_REM_TABLE, 9, *idx), STR, b"node1"),
        Varbind((*LLDP_REM_TABLE, 9, 5), STR, b"not a 3-part index"),
    ]
    (n,) = neighbours_from_rows("leaf-r0", rows, {}, ["Ethernet7"])
    assert n == LldpNeighbour("leaf-r0", "Ethernet7", system_name="node1", port_id="aa:bb:cc:00:11:23",
                              port_desc="mlx5_0", chassis_id="aa:bb:cc:00:11:22")  # fmt: skip


def test_openconfig_lldp_leaf_updates_round_trip() -> None:
    sent = [LldpNeighbour("leaf-r0", "Ethernet1", system_name="node1", port_id="mlx5_0", port_desc="mlx5_0"),
            LldpNeighbour("leaf-r0", "Ethernet2", system_name="node2", port_id="mlx5_0", chassis_id="c2")]
    assert neighbours_from_notifications("leaf-r0", [neighbour_notification(sent, 1)]) == sent


def test_openconfig_lldp_json_ietf_state_containers() -> None:
    note = pb.Notification(timestamp=1)
    u = note.update.add()
    u.path.CopyFrom(state_path("Ethernet3", "aa:bb"))
    u.val.json_ietf_val = json.dumps({"openconfig-lldp:system-name": "spine0", "port-id": "Ethernet9",
                                      "chassis-id": "aa:bb", "ttl": 120}).encode()  # fmt: skip
    (n,) = neighbours_from_notifications("leaf-r0", [note])
    assert (n.local_port, n.system_name, n.port_id, n.chassis_id) == ("Ethernet3", "spine0", "Ethernet9", "aa:bb")
