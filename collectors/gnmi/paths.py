"""The gNMI leaves fabricmon reads, as one table shared by the collector and the twin's target.

Per port (``P`` = the port name, e.g. ``Ethernet12``)::

    /interfaces/interface[name=P]/state/counters/{in-octets,out-octets,in-discards,out-discards,in-errors}
    /interfaces/interface[name=P]/state/oper-status                         UP | DOWN   (ON_CHANGE)
    /interfaces/interface[name=P]/ethernet/state/port-speed                 SPEED_400GB (ON_CHANGE)
    /interfaces/interface[name=P]/ethernet/state/counters/{in,out}-mac-pause-frames
    /qos/interfaces/interface[interface-id=P]/output/queues/queue[name=3]/state/
        {transmit-octets, transmit-pkts, dropped-pkts, ecn-marked-pkts, max-queue-len}
    /qos/interfaces/interface[interface-id=P]/pfc/pfc-priorities/pfc-priority[dot1p=3]/state/statistics/
        {pause-frames-rx, pause-frames-tx, pause-duration-rx, pause-duration-tx}      (µs; vendor)

OpenConfig for interfaces and queues (openconfig-qos list key ``interface-id``; ``max-queue-len``
is bytes, read-and-clear on the twin). OpenConfig has no per-priority PFC, so PFC sits on a
SONiC-mgmt-framework-like ``openconfig-qos-ext:pfc`` path (reference/telemetry.md §6). Queue 3 /
priority 3 is the RoCE lossless class.

A *slot* is ``leaf_index × n_ports + port_index``: collector arrays are (leaves, ports), so a
decoded update is one dict lookup from its serialized path to its slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pygnmi.spec.v080 import gnmi_pb2 as pb

PORT = object()  # placeholder for the port name in a path template
ROCE_QUEUE = "3"

LeafKind = Literal["counter", "gauge_max", "state"]
Elem = tuple[str, tuple[tuple[str, object], ...]]


@dataclass(frozen=True)
class Leaf:
    """One leaf per port: its name in collector arrays, path template, and how to read it."""

    key: str  # array name, e.g. "in_octets"
    elems: tuple[Elem, ...]
    kind: LeafKind  # counter: uint64 monotonic; gauge_max: max since last read; state: enum string
    unit: str


def _if(*tail: str) -> tuple[Elem, ...]:
    return (("interfaces", ()), ("interface", (("name", PORT),)), *((t, ()) for t in tail))


def _queue(*tail: str) -> tuple[Elem, ...]:
    return (
        ("qos", ()),
        ("interfaces", ()),
        ("interface", (("interface-id", PORT),)),
        ("output", ()),
        ("queues", ()),
        ("queue", (("name", ROCE_QUEUE),)),
        ("state", ()),
        *((t, ()) for t in tail),
    )


def _pfc(leaf: str) -> tuple[Elem, ...]:
    return (
        ("qos", ()),
        ("interfaces", ()),
        ("interface", (("interface-id", PORT),)),
        ("pfc", ()),
        ("pfc-priorities", ()),
        ("pfc-priority", (("dot1p", ROCE_QUEUE),)),
        ("state", ()),
        ("statistics", ()),
        (leaf, ()),
    )


LEAVES: tuple[Leaf, ...] = (
    Leaf("in_octets", _if("state", "counters", "in-octets"), "counter", "octets"),
    Leaf("out_octets", _if("state", "counters", "out-octets"), "counter", "octets"),
    Leaf("in_discards", _if("state", "counters", "in-discards"), "counter", "packets"),
    Leaf("out_discards", _if("state", "counters", "out-discards"), "counter", "packets"),
    Leaf("in_errors", _if("state", "counters", "in-errors"), "counter", "packets"),
    Leaf("in_pause_frames", _if("ethernet", "state", "counters", "in-mac-pause-frames"), "counter", "frames"),
    Leaf(
        "out_pause_frames", _if("ethernet", "state", "counters", "out-mac-pause-frames"), "counter", "frames"
    ),
    Leaf("q_tx_octets", _queue("transmit-octets"), "counter", "octets"),
    Leaf("q_tx_pkts", _queue("transmit-pkts"), "counter", "packets"),
    Leaf("q_dropped_pkts", _queue("dropped-pkts"), "counter", "packets"),
    Leaf("q_ecn_marked_pkts", _queue("ecn-marked-pkts"), "counter", "packets"),
    Leaf("q_max_len", _queue("max-queue-len"), "gauge_max", "bytes"),
    Leaf("pfc_rx_frames", _pfc("pause-frames-rx"), "counter", "frames"),
    Leaf("pfc_tx_frames", _pfc("pause-frames-tx"), "counter", "frames"),
    Leaf("pfc_rx_duration_us", _pfc("pause-duration-rx"), "counter", "us"),
    Leaf("pfc_tx_duration_us", _pfc("pause-duration-tx"), "counter", "us"),
    Leaf("oper_status", _if("state", "oper-status"), "state", "enum"),
    Leaf("port_speed", _if("ethernet", "state", "port-speed"), "state", "enum"),
)
LEAF_INDEX = {leaf.key: i for i, leaf in enumerate(LEAVES)}
NUMERIC = tuple(i for i, leaf in enumerate(LEAVES) if leaf.kind != "state")

# Enumerations served as strings; the collector stores their codes (0 = unknown/absent).
OPER_STATUS = {
    "UP": 1,
    "DOWN": 2,
    "TESTING": 3,
    "UNKNOWN": 4,
    "DORMANT": 5,
    "NOT_PRESENT": 6,
    "LOWER_LAYER_DOWN": 7,
}
SPEED_BPS = {f"SPEED_{g}GB": g * 1_000_000_000 for g in (1, 10, 25, 40, 50, 100, 200, 400, 800)}


def speed_identity(speed_bps: float) -> str:
    """``openconfig-if-ethernet`` identity for a speed (``SPEED_400GB``); unknown → SPEED_UNKNOWN."""
    g = round(speed_bps / 1e9)
    name = f"SPEED_{g}GB"
    return name if name in SPEED_BPS else "SPEED_UNKNOWN"


def leaf_path(leaf: Leaf, port: str) -> pb.Path:
    return pb.Path(
        elem=[
            pb.PathElem(name=n, key={k: (port if v is PORT else str(v)) for k, v in keys})
            for n, keys in leaf.elems
        ]
    )


def path_key(path: pb.Path) -> bytes:
    """Canonical bytes of a path's elems (origin/target dropped, keys sorted) for lookups."""
    canon = pb.Path(elem=[pb.PathElem(name=e.name, key=dict(sorted(e.key.items()))) for e in path.elem])
    return bytes(canon.SerializeToString(deterministic=True))


def subscription_paths(keys: Sequence[str] | None = None) -> list[pb.Path]:
    """Wildcard paths (``name=*``) covering the given leaves (default: all), one per leaf."""
    chosen = LEAVES if keys is None else tuple(LEAVES[LEAF_INDEX[k]] for k in keys)
    return [
        pb.Path(
            elem=[
                pb.PathElem(name=n, key={k: ("*" if v is PORT else str(v)) for k, v in kv})
                for n, kv in leaf.elems
            ]
        )
        for leaf in chosen
    ]


def _elem_bytes(name: str, keys: dict[str, str]) -> bytes:
    return bytes(pb.Path(elem=[pb.PathElem(name=name, key=keys)]).SerializeToString(deterministic=True))


def slot_lookup(port_names: Sequence[str]) -> dict[bytes, int]:
    """Serialized full path → slot (leaf index × n_ports + port index), for every leaf and port.

    A serialized Path of elems is the concatenation of its one-elem serializations (repeated field
    3), so keys are assembled from per-elem pieces — 70 k keys in ~0.1 s instead of seconds — and
    equal what a plain serializer produces for single-key elems: the hot loop needs no
    canonicalization.
    """
    n = len(port_names)
    out: dict[bytes, int] = {}
    pieces: dict[tuple[str, tuple[tuple[str, object], ...], str], bytes] = {}

    def piece(elem: Elem, port: str) -> bytes:
        name, kv = elem
        has_port = any(v is PORT for _, v in kv)
        ck = (name, kv, port if has_port else "")
        b = pieces.get(ck)
        if b is None:
            b = _elem_bytes(name, {k: (port if v is PORT else str(v)) for k, v in sorted(kv)})
            pieces[ck] = b
        return b

    for li, leaf in enumerate(LEAVES):
        for pi, port in enumerate(port_names):
            out[b"".join(piece(e, port) for e in leaf.elems)] = li * n + pi
    return out
