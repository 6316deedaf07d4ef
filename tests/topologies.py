"""Named fixture topologies: the rail-optimized fabrics the tests build, each with a picture.

Ask for a shape by its name instead of spelling ``rail_optimized(...)`` in every test; every
function takes the fabric's ``name`` and passes further keywords (``speed_gbps``, ``snmp``,
``uplinks_per_leaf`` …) to :func:`fabricmon.core.topology.railgen.rail_optimized`.
"""

from __future__ import annotations

from typing import Any

from fabricmon.core.topology.railgen import rail_optimized
from fabricmon.core.topology.spec import FabricSpec


def one_su_256_gpus(name: str = "su1", **kw: Any) -> FabricSpec:
    """One scalable unit, the DGX SuperPOD pattern (768 ports)::

        spine0 … spine3                 32 parallel links per leaf (8 to each spine)
        leaf-r0 … leaf-r7               rail r: NIC r of every server
        node001 … node032 × 8 GPUs
    """
    return rail_optimized(name, **kw)


def two_leaf_one_spine(name: str = "tiny", *, servers: int = 2, **kw: Any) -> FabricSpec:
    """Two GPUs per server, so two rail leaves, under one spine::

              spine0
             /      \\
        leaf-r0    leaf-r1
           |  \\    /  |            node i: gpu0 → leaf-r0, gpu1 → leaf-r1
        node001 … node00{servers}
    """
    return rail_optimized(name, servers=servers, gpus_per_server=2, spines=1, **kw)


def two_leaf_two_spine(name: str = "small", *, servers: int = 4, **kw: Any) -> FabricSpec:
    """Two rail leaves, each cabled to two spines::

        spine0   spine1
          |  \\  /  |
        leaf-r0  leaf-r1
        node001 … node00{servers}, 2 GPUs each
    """
    return rail_optimized(name, servers=servers, gpus_per_server=2, spines=2, **kw)


def four_leaf_two_spine(name: str = "small", *, servers: int = 4, **kw: Any) -> FabricSpec:
    """Four GPUs per server, so four rail leaves, under two spines::

            spine0        spine1
        leaf-r0 leaf-r1 leaf-r2 leaf-r3
        node001 … node00{servers}, 4 GPUs each
    """
    return rail_optimized(name, servers=servers, gpus_per_server=4, spines=2, **kw)
