"""The fabric as per-GPU and per-cable arrays (positions in the port index), and where a run's ranks
sit on it (the rank map matched to GPUs).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from fabricmon.core.topology.port_index import PortIndex
from fabricmon.core.topology.spec import FabricSpec

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class FabricLayout:
    """Per-GPU and per-cable arrays of a fabric, positions in the PortIndex (built once per fabric).

    GPUs are numbered host by host (fabric order), by local index inside a host.
    """

    index: PortIndex
    gpu_host: IntArray  # (G,) host number
    gpu_local: IntArray  # (G,) GPU index inside its host
    gpu_rail: IntArray
    nic_pos: IntArray  # (G,) port position of the leaf port facing the GPU's NIC
    nic_leaf: IntArray  # (G,) leaf number (leaf_names order)
    link: IntArray  # (L, 4): leaf number, leaf port position, spine number, spine port position
    host_names: tuple[str, ...]
    leaf_names: tuple[str, ...]
    spine_names: tuple[str, ...]
    gpu_by_port: dict[tuple[str, str], int] = field(repr=False)  # (switch, port name) → GPU
    gpu_by_host_local: dict[tuple[str, int], int] = field(repr=False)

    @property
    def n_gpus(self) -> int:
        return len(self.gpu_host)

    @classmethod
    def from_spec(cls, fabric: FabricSpec, index: PortIndex) -> FabricLayout:
        ifindex_of = {(sw.name, p.name): p.ifindex for sw in fabric.switches for p in sw.ports}
        role = {sw.name: sw.role for sw in fabric.switches}

        def pos(switch: str, port: str) -> int:
            if (switch, port) not in ifindex_of:
                raise ValueError(f"cabling names unknown port {switch}:{port}")
            return index.position(switch, ifindex_of[(switch, port)])

        host: list[int] = []
        local: list[int] = []
        rail: list[int] = []
        nic: list[int] = []
        nic_switch: list[str] = []
        by_port: dict[tuple[str, str], int] = {}
        by_host_local: dict[tuple[str, int], int] = {}
        for h, hs in enumerate(fabric.hosts):
            for g in sorted(hs.gpus, key=lambda g: g.index):
                by_port[(g.switch, g.port)] = len(host)
                by_host_local[(hs.name, g.index)] = len(host)
                host.append(h)
                local.append(g.index)
                rail.append(g.rail)
                nic.append(pos(g.switch, g.port))
                nic_switch.append(g.switch)
        leaves = sorted(set(nic_switch) | {sw.name for sw in fabric.switches if sw.role == "leaf"})
        spines = sorted(sw.name for sw in fabric.switches if sw.role == "spine")
        leaf_id = {n: i for i, n in enumerate(leaves)}
        spine_id = {n: i for i, n in enumerate(spines)}
        links: list[tuple[int, int, int, int]] = []
        for ln in fabric.links:
            a, b = pos(ln.a_switch, ln.a_port), pos(ln.b_switch, ln.b_port)
            if role[ln.a_switch] == "leaf" and role[ln.b_switch] == "spine":
                links.append((leaf_id[ln.a_switch], a, spine_id[ln.b_switch], b))
            elif role[ln.b_switch] == "leaf" and role[ln.a_switch] == "spine":
                links.append((leaf_id[ln.b_switch], b, spine_id[ln.a_switch], a))
        i64 = np.int64
        return cls(
            index=index,
            gpu_host=np.asarray(host, dtype=i64),
            gpu_local=np.asarray(local, dtype=i64),
            gpu_rail=np.asarray(rail, dtype=i64),
            nic_pos=np.asarray(nic, dtype=i64),
            nic_leaf=np.asarray([leaf_id[s] for s in nic_switch], dtype=i64),
            link=np.asarray(links, dtype=i64).reshape(-1, 4),
            host_names=tuple(h.name for h in fabric.hosts),
            leaf_names=tuple(leaves),
            spine_names=tuple(spines),
            gpu_by_port=by_port,
            gpu_by_host_local=by_host_local,
        )


@dataclass(frozen=True, eq=False)
class RankPlacement:
    """Rank → GPU of the layout (-1: the rank map does not place it), for a world of ``world_size``."""

    gpu_of_rank: IntArray
    problems: tuple[str, ...] = ()  # rank-map entries that could not be placed, and why

    @property
    def world_size(self) -> int:
        return len(self.gpu_of_rank)

    @property
    def coverage(self) -> float:
        """Fraction of the world's ranks the map places on a GPU of the fabric."""
        return float(np.mean(self.gpu_of_rank >= 0)) if self.world_size else 0.0

    @property
    def key(self) -> str:
        return hashlib.sha1(self.gpu_of_rank.astype("<i8").tobytes()).hexdigest()[:16]


def place_ranks(layout: FabricLayout, entries: list[dict[str, object]], world_size: int) -> RankPlacement:
    """Match rank-map entries (rank, host, local_rank, switch, switch_port) to the layout's GPUs.

    The NIC's switch port wins when given (it is what the cabling says); else (host, local_rank).
    Entries that match nothing are reported in ``problems`` and leave their rank unplaced.
    """
    gpu = np.full(world_size, -1, dtype=np.int64)
    problems: list[str] = []
    for e in entries:
        rank = e.get("rank")
        if not isinstance(rank, int) or not 0 <= rank < world_size:
            problems.append(f"rank {rank!r} outside the world of {world_size}")
            continue
        g = layout.gpu_by_port.get((str(e.get("switch") or ""), str(e.get("switch_port") or "")))
        if g is None and isinstance(e.get("local_rank"), int):
            g = layout.gpu_by_host_local.get((str(e.get("host") or ""), int(e["local_rank"])))  # type: ignore[call-overload]
        if g is None:
            problems.append(
                f"rank {rank}: no GPU of the fabric at {e.get('switch')}:{e.get('switch_port')} "
                f"or {e.get('host')}/{e.get('local_rank')}"
            )
            continue
        gpu[rank] = g
    return RankPlacement(gpu, tuple(problems))
