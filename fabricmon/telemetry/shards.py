"""Shards: how the switches of every fabric are split between collector tasks.

One collector task holds one shard (a lease, see :mod:`.leases`) and polls its switches in one
asyncio loop. The split is deterministic — switches sorted by name within each fabric, cut into
runs of ``shard_size`` — so every worker, beat and the status command compute the same shard ids
from the same topology without coordinating::

    fabric "su1": leaf-r0 … leaf-r7, spine0 … spine3   (shard_size 8)
        su1:0 → leaf-r0 … leaf-r7
        su1:1 → spine0 … spine3

A shard never spans two fabrics: the framer of a fabric then only ever waits for the shards of
that fabric, and renaming one fabric never reshuffles another's shards.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from fabricmon.core.topology.spec import FabricSpec


@dataclass(frozen=True)
class Shard:
    shard_id: str  # "{fabric}:{k}"
    fabric: str
    switches: tuple[str, ...]


class UnknownShardError(LookupError):
    """A shard id that the current topology does not produce (fabric gone or shrunk)."""


def plan_shards(fabrics: Iterable[FabricSpec], shard_size: int) -> list[Shard]:
    """All shards of all fabrics, in a stable order."""
    if shard_size < 1:
        raise ValueError(f"FABRICMON_SHARD_SIZE must be >= 1, got {shard_size}")
    shards: list[Shard] = []
    for fabric in sorted(fabrics, key=lambda f: f.name):
        names = sorted(sw.name for sw in fabric.switches)
        for k, start in enumerate(range(0, len(names), shard_size)):
            shards.append(Shard(f"{fabric.name}:{k}", fabric.name, tuple(names[start : start + shard_size])))
    return shards


def find_shard(fabrics: Iterable[FabricSpec], shard_size: int, shard_id: str) -> Shard:
    for shard in plan_shards(fabrics, shard_size):
        if shard.shard_id == shard_id:
            return shard
    raise UnknownShardError(f"no shard {shard_id!r} in the current topology (shard size {shard_size})")
