"""Routing of MoE traffic onto ports (pure numpy, no services).

Fabric used (``two_rail_small``)::

    spine0  spine1                  2 parallel links per leaf–spine pair
    leaf-r0 leaf-r1 leaf-r2 leaf-r3
    node001..node004, 4 GPUs each (GPU g → leaf-r{g})
"""

from __future__ import annotations

import numpy as np
import pytest

from fabricmon.core.topology.port_index import build_port_index
from tests import topologies
from tests.topologies import four_leaf_two_spine
from twin.moe import MoeConfig, MoeTraffic
from twin.routing import Router, Wiring


@pytest.fixture(scope="module")
def small():
    fabric = four_leaf_two_spine("small", servers=4)
    index = build_port_index(fabric)
    return fabric, index, Wiring(fabric, index)


@pytest.fixture(scope="module")
def one_su_256_gpus():
    fabric = topologies.one_su_256_gpus()
    index = build_port_index(fabric)
    return fabric, index, Wiring(fabric, index)


def _matrix(n: int, seed: int = 3) -> np.ndarray:
    m = np.random.default_rng(seed).uniform(1e6, 5e6, size=(n, n))
    np.fill_diagonal(m, 0.0)
    return m


@pytest.mark.parametrize("mode", ["pxn", "ecmp"])
def test_bytes_sent_equal_bytes_received_and_every_cable_conserves(small, mode):
    _fabric, index, wiring = small
    m = _matrix(wiring.n_gpus)
    pb = Router(wiring, mode).route(m)
    off_host = m[wiring.gpu_host[:, None] != wiring.gpu_host[None, :]].sum()
    host = index.host_facing
    assert pb.in_bytes[host].sum() == pytest.approx(off_host)  # what NICs send
    assert pb.out_bytes[host].sum() == pytest.approx(off_host)  # what NICs receive
    assert pb.in_bytes.sum() == pytest.approx(pb.out_bytes.sum())
    # Each leaf–spine cable: bytes out of one end are bytes into the other.
    for _leaf, leaf_pos, _spine, spine_pos in wiring.link.tolist():
        assert pb.out_bytes[leaf_pos] == pytest.approx(pb.in_bytes[spine_pos])
        assert pb.out_bytes[spine_pos] == pytest.approx(pb.in_bytes[leaf_pos])


def test_pxn_keeps_traffic_on_rail_no_spine_bytes(small):
    _fabric, index, wiring = small
    pb = Router(wiring, "pxn").route(_matrix(wiring.n_gpus))
    fabric_facing = ~index.host_facing
    assert pb.in_bytes[fabric_facing].sum() == 0.0
    assert pb.out_bytes[fabric_facing].sum() == 0.0
    # The destination GPU's NIC port receives exactly what other servers sent to that GPU.
    m = _matrix(wiring.n_gpus)
    pb = Router(wiring, "pxn").route(m)
    for d in range(wiring.n_gpus):
        from_others = m[wiring.gpu_host != wiring.gpu_host[d], d].sum()
        assert pb.out_bytes[wiring.nic_pos[d]] == pytest.approx(from_others)


def test_ecmp_sends_cross_rail_bytes_through_spines(small):
    _fabric, index, wiring = small
    m = _matrix(wiring.n_gpus)
    pb = Router(wiring, "ecmp").route(m)
    cross_rail = m[(wiring.gpu_host[:, None] != wiring.gpu_host[None, :])
                   & (wiring.gpu_rail[:, None] != wiring.gpu_rail[None, :])].sum()
    spine = index.rail < 0
    assert pb.in_bytes[spine].sum() == pytest.approx(cross_rail)
    # Every uplink carries something: the hash spreads flows.
    uplinks = wiring.link[:, 1]
    assert (pb.out_bytes[uplinks] > 0).all()


def test_same_server_traffic_never_touches_the_network(small):
    _fabric, _index, wiring = small
    same_host = (wiring.gpu_host[:, None] == wiring.gpu_host[None, :]).astype(float) * 1e9
    for mode in ("pxn", "ecmp"):
        pb = Router(wiring, mode).route(same_host)
        assert pb.in_bytes.sum() == 0.0 and pb.out_bytes.sum() == 0.0


def test_ecmp_hash_is_deterministic_and_seeded(small):
    _fabric, _index, wiring = small
    m = _matrix(wiring.n_gpus)
    a = Router(wiring, "ecmp", seed=1).route(m).out_bytes
    b = Router(wiring, "ecmp", seed=1).route(m).out_bytes
    c = Router(wiring, "ecmp", seed=2).route(m).out_bytes
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_wrong_matrix_shape_is_a_clear_error(small):
    _fabric, _index, wiring = small
    with pytest.raises(ValueError, match="does not match 16 GPUs"):
        Router(wiring, "pxn").route(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="routing mode"):
        Router(wiring, "spray")  # type: ignore[arg-type]


def test_hot_gpu_port_carries_several_times_the_mean_on_one_su(one_su_256_gpus):
    """Reference fabric_model.md §2.1: MoE skew + PXN → leaf→NIC max/mean ≈ 4.5 per dispatch."""
    _fabric, index, wiring = one_su_256_gpus
    job = MoeTraffic(MoeConfig(), wiring.n_gpus, seed=7)
    router = Router(wiring, "pxn")
    host = index.host_facing
    ratios = []
    for lt in job.next_step():
        out = router.route(lt.dispatch_bytes).out_bytes
        hot_port = wiring.nic_pos[job.gpu_of_expert(lt.hot_expert)]
        assert int(np.argmax(out)) == hot_port  # the hottest port faces the hot GPU's NIC
        ratios.append(out[hot_port] / out[host].mean())
    assert 3.5 < float(np.mean(ratios)) < 6.0


# -- EP groups: blocks routed like the block-diagonal matrix ---------------------------------------
def _blocks(groups: int, g: int, seed: int = 4) -> np.ndarray:
    b = np.random.default_rng(seed).uniform(1e6, 5e6, size=(groups, g, g))
    b[:, np.arange(g), np.arange(g)] = 0.0
    return b


def _dense(blocks: np.ndarray) -> np.ndarray:
    k, g, _ = blocks.shape
    m = np.zeros((k * g, k * g))
    for i in range(k):
        m[i * g:(i + 1) * g, i * g:(i + 1) * g] = blocks[i]
    return m


@pytest.mark.parametrize("mode", ["pxn", "ecmp"])
@pytest.mark.parametrize("gpus_per_server, group", [(4, 8), (3, 4)])  # (3, 4): groups straddle servers
def test_ep_blocks_route_like_the_dense_matrix_and_conserve_bytes(mode, gpus_per_server, group):
    """node001..node004 with 4 GPUs (groups of 8 = two servers) or 3 GPUs (groups of 4: group 0 is
    node001's 3 GPUs and node002's gpu0)."""
    from fabricmon.core.topology.railgen import rail_optimized

    fabric = rail_optimized("ep", servers=4, gpus_per_server=gpus_per_server, spines=2, uplinks_per_leaf=4)
    index = build_port_index(fabric)
    wiring = Wiring(fabric, index)
    blocks = _blocks(wiring.n_gpus // group, group)
    grouped = Router(wiring, mode, group_gpus=group)
    by_blocks = grouped.route(blocks)
    dense = Router(wiring, mode).route(_dense(blocks))
    np.testing.assert_allclose(by_blocks.in_bytes, dense.in_bytes, rtol=1e-12)
    np.testing.assert_allclose(by_blocks.out_bytes, dense.out_bytes, rtol=1e-12)
    m = _dense(blocks)
    off_host = m[wiring.gpu_host[:, None] != wiring.gpu_host[None, :]].sum()
    assert by_blocks.out_bytes[index.host_facing].sum() == pytest.approx(off_host)
    # only pairs inside a group are listed: groups x G^2 at most, never N^2
    src, dst = grouped.pairs // wiring.n_gpus, grouped.pairs % wiring.n_gpus
    if mode == "ecmp":
        assert np.all(src // group == dst // group)
    else:  # the proxy NIC may belong to another group; its server has a GPU in dst's group
        in_group = set(zip(wiring.gpu_host.tolist(), (np.arange(wiring.n_gpus) // group).tolist(), strict=True))
        assert set(zip(wiring.gpu_host[src].tolist(), (dst // group).tolist(), strict=True)) <= in_group
    assert len(grouped.pairs) < len(Router(wiring, mode).pairs)
    with pytest.raises(ValueError, match="route its"):
        grouped.route(m)
    with pytest.raises(ValueError, match="EP groups"):
        grouped.route(blocks[:1])



def test_a_job_of_groups_routes_the_servers_sums_like_its_blocks(small):
    """Steps nobody reports are routed from each server's sums (twin/moe.py server_sums), the
    reported ones from their blocks: the same port bytes either way."""
    from twin.schedule import JobTimeline

    _fabric, index, wiring = small
    router = Router(wiring, "pxn", group_gpus=8)

    def phases(report: bool) -> list:  # type: ignore[type-arg]
        tl = JobTimeline(MoeTraffic(MoeConfig(layers=2, ep_size=8), wiring.n_gpus, seed=4), router,
                         index.speed_bps, index.host_facing, 0)
        seen: list[int] = []
        if report:
            tl.on_phase = lambda ph, blocks: seen.append(blocks.shape[0])
        tl.ensure(1_000_000_000)
        assert seen == ([2] * len(tl.phases) if report else [])
        return list(tl.phases)

    for a, b in zip(phases(report=True), phases(report=False), strict=True):
        assert (a.start_ns, a.end_ns) == pytest.approx((b.start_ns, b.end_ns), abs=1)
        np.testing.assert_allclose(a.out_bytes, b.out_bytes, rtol=1e-12)
        np.testing.assert_allclose(a.in_bytes, b.in_bytes, rtol=1e-12)
