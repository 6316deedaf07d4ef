"""twin/scenarios.py: the offline scenario runner's frames follow the twin's own models, and its
ground truth follows the twin's own traffic."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from twin.fabric_queues import FabricQueues, peer_positions
from twin.scenarios import (
    BASE_JOB,
    PKT_BYTES,
    ScenarioTraffic,
    _StackedQueues,
    run_batch,
    twin_fabric,
)
from twin.schedule import JobTimeline

NS = 1_000_000_000


def test_stacked_queues_match_fabric_queues_on_the_same_timeline() -> None:
    """The seed-stacked stepping is the fabric_queues model: same timeline, same counters."""
    tf = twin_fabric()
    router, ports = tf.routers["pxn"], tf.ports
    job = replace(BASE_JOB, hot_boost=1.5)  # with an incast, so PFC and ECN are exercised too

    def timeline() -> JobTimeline:
        return JobTimeline(
            ScenarioTraffic(job, tf.wiring.n_gpus, seed=3),
            router,
            ports.speed_bps,
            ports.host_facing,
            0,
            keep_s=5.0,
        )

    ref_tl, tl = timeline(), timeline()
    ref = FabricQueues(
        ref_tl,
        ports,
        peer_positions(tf.wiring.link, len(ports)),
        0,
        buffer_bytes=16e6,
        pkt_bytes=PKT_BYTES,
        keep_s=5.0,
    )
    mine = _StackedQueues(tf, 1, router, lossy=False)
    before = ref.counters_at(0)
    cursor = 0.0
    for _ in range(3):
        start = tl.cursor_ns
        tl.ensure(start + 1)
        for ph in [ph for ph in tl.phases if ph.start_ns >= start]:
            mine.phase(np.array([(ph.start_ns - cursor) / NS]), [ph], ports.host_facing)
            cursor = ph.end_ns
    mine.push(np.array([(tl.cursor_ns - cursor) / NS]), np.zeros(len(ports)), mine.last_in_active)
    after = ref.counters_at(tl.cursor_ns)
    # mine accumulates from the last reset (construction) — i.e. over the same three steps
    for key, ref_key in (("tx", "tx_bytes"), ("ecn", "ecn_marked_bytes"), ("pfc_tx_s", "pfc_tx_s")):
        want = after[ref_key] - before[ref_key]
        assert want.sum() > 0, ref_key
        np.testing.assert_allclose(mine.acc[key], want, rtol=2e-3, atol=1e-6 * want.max(), err_msg=key)


def test_balanced_has_no_skew_and_no_truth() -> None:
    (scn,) = run_batch("balanced", [0], windows=20)
    geo = scn.geo
    load = scn.metrics["out_bps"][:, geo.is_leaf_host] / geo.speed_bps[geo.is_leaf_host]
    assert load.mean() > 0.1  # traffic flows …
    assert (load.max(axis=1) / load.mean(axis=1)).max() < 1.2  # … evenly
    assert all(t == () for t in scn.hot_truth) and scn.onset == scn.n_windows
    assert np.all(scn.fan_in[:, geo.is_leaf_host] == 7)  # PXN: one proxy NIC per other server


def test_static_truth_is_the_busiest_port_and_runs_are_deterministic() -> None:
    a = run_batch("static", [4, 5], windows=30)
    b = run_batch("static", [4, 5], windows=30)
    for x, y in zip(a, b, strict=True):
        for k in x.metrics:
            np.testing.assert_array_equal(x.metrics[k], y.metrics[k])
        assert x.hot_truth == y.hot_truth
    for scn in a:
        hot = [t for t in range(scn.n_windows) if scn.hot_truth[t]]
        assert hot and hot[0] == scn.onset and not any(scn.hot_truth[: scn.onset])
        busiest = [int(np.argmax(scn.metrics["out_bps"][t])) for t in hot]
        assert busiest == [scn.hot_truth[t][0] for t in hot]
        assert len({scn.hot_truth[t] for t in hot}) == 1  # static: one port


def test_moving_truth_moves_between_consecutive_hot_windows() -> None:
    (scn,) = run_batch("moving", [1], windows=50)
    moves = [t for t, m in enumerate(scn.moved) if m]
    assert moves and moves[0] == scn.moving_onset
    for t in moves:
        assert scn.hot_truth[t - 1] and scn.hot_truth[t] != scn.hot_truth[t - 1]


def test_ecmp_collision_loads_one_uplink_and_pfc_storm_pauses_its_leaf() -> None:
    (ecmp,) = run_batch("ecmp", [2], windows=24)
    geo = ecmp.geo
    (uplink,) = ecmp.hot_truth[-1]
    assert geo.is_uplink[uplink]
    leaf = geo.index.switch_of[uplink]
    peers = geo.is_uplink & (geo.index.switch_of == leaf)
    util = ecmp.metrics["out_bps"][-1] / geo.speed_bps
    assert util[uplink] >= 1.6 * util[peers].mean() and util[uplink] >= 0.5
    assert ecmp.fan_in[-1][uplink] < 4  # a few elephants, not many senders

    (pfc,) = run_batch("pfc", [2], windows=24)
    paused = pfc.metrics["pfc_paused_fraction"]
    assert paused[: pfc.onset].max() < 0.3
    assert (paused[pfc.onset + 1 :].max(axis=1) >= 0.3).all()
    assert pfc.metrics["drops_ps"].max() == 0.0  # lossless: pauses, never drops


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown scenario kind 'storm'"):
        run_batch("storm", [0])
