"""OpenConfig LLDP over gNMI Get: who is plugged into each port (the twin's gNMI targets serve it).

::

    /lldp/interfaces/interface[name=P]/neighbors/neighbor[id=N]/state/
        {system-name, port-id, port-id-type, port-description, chassis-id, chassis-id-type}

Both encodings a device may answer with are read: one update per leaf (``string_val``), or one
per neighbour's ``state`` container as JSON (``json_ietf_val`` / ``json_val``). The encoder the
twin uses (:func:`neighbour_notification`) lives here too, so target and collector agree.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import grpc
from pygnmi.spec.v080 import gnmi_pb2 as pb
from pygnmi.spec.v080 import gnmi_pb2_grpc as pbg

from fabricmon.core.topology.cabling import LldpNeighbour

LLDP_STATE_LEAVES = {
    "system-name": "system_name",
    "port-id": "port_id",
    "port-description": "port_desc",
    "chassis-id": "chassis_id",
}


def state_path(port: str = "*", neighbour: str = "*") -> pb.Path:
    """``/lldp/interfaces/interface[name=port]/neighbors/neighbor[id=neighbour]/state``."""
    return pb.Path(elem=[
        pb.PathElem(name="lldp"), pb.PathElem(name="interfaces"),
        pb.PathElem(name="interface", key={"name": port}), pb.PathElem(name="neighbors"),
        pb.PathElem(name="neighbor", key={"id": neighbour}), pb.PathElem(name="state"),
    ])  # fmt: skip


def is_lldp_request(path: pb.Path, prefix: pb.Path | None = None) -> bool:
    elems = [*(prefix.elem if prefix is not None else ()), *path.elem]
    return bool(elems) and elems[0].name == "lldp"


def neighbour_notification(neighbours: Sequence[LldpNeighbour], ts_ns: int) -> pb.Notification:
    """One notification with a ``string_val`` update per leaf of every neighbour."""
    note = pb.Notification(timestamp=ts_ns)
    for k, n in enumerate(neighbours):
        nid = n.chassis_id or f"{n.system_name}#{k}"
        base = state_path(n.local_port, nid)
        for leaf, attr in LLDP_STATE_LEAVES.items():
            u = note.update.add()
            u.path.CopyFrom(base)
            u.path.elem.add(name=leaf)
            u.val.string_val = str(getattr(n, attr))
    return note


def _key(path: pb.Path, name: str, key: str) -> str | None:
    return next((e.key.get(key) for e in path.elem if e.name == name), None)


def neighbours_from_notifications(switch: str, notes: Iterable[pb.Notification]) -> list[LldpNeighbour]:
    """Decode Get notifications (either encoding) into neighbours, in the order first seen."""
    rows: dict[tuple[str, str], dict[str, str]] = {}
    for note in notes:
        for u in note.update:
            path = pb.Path(elem=[*note.prefix.elem, *u.path.elem])
            port, nid = _key(path, "interface", "name"), _key(path, "neighbor", "id")
            if port is None or nid is None:
                continue
            row = rows.setdefault((port, nid), {})
            last = path.elem[-1].name if path.elem else ""
            which = u.val.WhichOneof("value")
            if which in ("json_ietf_val", "json_val"):
                doc: Any = json.loads(getattr(u.val, which) or b"{}")
                doc = doc.get("openconfig-lldp:state", doc.get("state", doc)) if isinstance(doc, dict) else {}
                for leaf, attr in LLDP_STATE_LEAVES.items():
                    v = doc.get(leaf, doc.get(f"openconfig-lldp:{leaf}"))
                    if v is not None:
                        row[attr] = str(v)
            elif last in LLDP_STATE_LEAVES and which == "string_val":
                row[LLDP_STATE_LEAVES[last]] = u.val.string_val
    return [LldpNeighbour(switch=switch, local_port=port, **fields) for (port, _nid), fields in rows.items()]


async def read_neighbours(
    switch: str, address: str, port: int, *, timeout_s: float = 5.0, root_cert_pem: bytes | None = None
) -> list[LldpNeighbour]:
    """gNMI Get of the switch's LLDP state; raises ``grpc.aio.AioRpcError`` on failure."""
    target = f"{address}:{port}"
    if root_cert_pem is None:
        channel = grpc.aio.insecure_channel(target)
    else:
        channel = grpc.aio.secure_channel(
            target, grpc.ssl_channel_credentials(root_certificates=root_cert_pem)
        )
    try:
        stub = pbg.gNMIStub(channel)
        req = pb.GetRequest(path=[state_path()], type=pb.GetRequest.STATE, encoding=pb.JSON_IETF)
        resp = await stub.Get(req, timeout=timeout_s)
        return neighbours_from_notifications(switch, resp.notification)
    finally:
        await channel.close()
