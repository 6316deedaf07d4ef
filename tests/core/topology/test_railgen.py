import numpy as np

from fabricmon.core.topology.port_index import build_port_index
from tests.topologies import one_su_256_gpus


def test_one_scalable_unit_matches_superpod_shape() -> None:
    fabric = one_su_256_gpus()
    leaves = [s for s in fabric.switches if s.role == "leaf"]
    spines = [s for s in fabric.switches if s.role == "spine"]
    assert len(leaves) == 8 and len(spines) == 4
    assert all(len(s.ports) == 64 for s in fabric.switches)
    assert len(fabric.hosts) == 32 and all(len(h.gpus) == 8 for h in fabric.hosts)
    # NIC r of every server goes to rail-leaf r.
    assert all(g.switch == f"leaf-r{g.rail}" for h in fabric.hosts for g in h.gpus)
    assert len(fabric.links) == 8 * 32


def test_port_index_is_grouped_and_stable() -> None:
    a, b = build_port_index(one_su_256_gpus()), build_port_index(one_su_256_gpus())
    assert a.version == b.version and len(a) == 768
    # leaves first (by rail), host-facing before fabric-facing within a leaf, spines last
    assert list(a.rail[:64]) == [0] * 64 and bool(a.host_facing[0]) and not bool(a.host_facing[40])
    assert np.all(a.rail[-256:] == -1)
    assert a.position("leaf-r1", 1) == 64
    c = build_port_index(one_su_256_gpus(servers=16))
    assert c.version != a.version
