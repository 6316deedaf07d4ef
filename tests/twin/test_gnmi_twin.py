"""The gNMI collector against the running twin's own gRPC targets (``TwinConfig(gnmi=True)``).

    Twin: MoE job → timeline → CounterClock (octets) ─┐
                         └──→ FabricQueues (ECN, PFC, ├─ TwinSwitchSource ─ GnmiFabric 127.0.0.1:0
                              watermark per port)    ─┘        ══ Subscribe STREAM ══▶ GnmiCollector
    truth: twin.counters_at / true_rates / true_queue / true_watermark at the device timestamps
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import numpy as np
import pytest

from collectors.gnmi.metrics import GnmiSnapshot, IntervalTaker
from collectors.gnmi.paths import LEAF_INDEX
from collectors.gnmi.session import GnmiCollector, GnmiTargetSpec
from twin.cluster import Twin
from twin.config import TwinConfig
from twin.gnmi_target import malformed_after
from twin.moe import MoeConfig

pytestmark = pytest.mark.integration

# Compute-heavy steps (long attention/expert compute and backward gap): the all-to-alls are short
# line-rate bursts inside mostly idle seconds. One hot expert, no regime shift: it stays put.
JOB = MoeConfig(attention_ms=10.0, expert_ms=20.0, step_gap_ms=300.0, regime_shift_prob=0.0)


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    with Twin(TwinConfig(name="gnmitwin", servers=4, gpus_per_server=4, spines=2, gnmi=True, job=JOB,
                         seed=1)) as tw:
        yield tw


def hot_port(tw: Twin, t1_ns: int, t2_ns: int) -> tuple[str, int]:
    """(switch, local position) of the port facing the hot GPU, from the twin's own phases."""
    hot = {int(e["hot_gpu"]) for e in tw.phases(t1_ns, t2_ns)}  # type: ignore[call-overload]
    assert len(hot) == 1, hot
    pos = int(tw.wiring.nic_pos[hot.pop()])
    switch = tw.ports.switch_names[int(tw.ports.switch_of[pos])]
    return switch, pos - tw.ports.slice_of(switch).start


def spec(tw: Twin, switch: str, interval_s: float, **kw: float) -> GnmiTargetSpec:
    sl = tw.ports.slice_of(switch)
    return GnmiTargetSpec(switch, "127.0.0.1", tw.gnmi_ports[switch], tw.ports.port_names[sl],
                          sample_interval_s=interval_s, **kw)


def device_ts(snap: GnmiSnapshot, key: str) -> int:
    row = snap.ts_ns[LEAF_INDEX[key]]
    assert len(set(row.tolist())) == 1  # one notification per sample: one device time for all ports
    return int(row[0])


def check_interval(tw: Twin, switch: str, prev: GnmiSnapshot, cur: GnmiSnapshot,
                   m: dict[str, np.ndarray]) -> None:
    """Every metric of one interval against the twin's truth at the device timestamps."""
    t1, t2 = device_ts(prev, "in_octets"), device_ts(cur, "in_octets")
    assert t2 > t1
    dt = (t2 - t1) / 1e9
    speed = tw.ports.speed_bps[tw.ports.slice_of(switch)]
    # interface counters: exactly the twin's counters; rates within 1 % of the integrated truth
    for key, col in (("in_octets", "ifHCInOctets"), ("out_octets", "ifHCOutOctets")):
        for snap, t in ((prev, t1), (cur, t2)):
            np.testing.assert_array_equal(snap.values[LEAF_INDEX[key]], tw.counters_at(switch, t)[col])
    rates = tw.true_rates(switch, t1, t2)
    np.testing.assert_allclose(m["in_bps"], rates["in_octets_per_s"] * 8, rtol=0.01, atol=100.0)
    np.testing.assert_allclose(m["out_bps"], rates["out_octets_per_s"] * 8, rtol=0.01, atol=100.0)
    np.testing.assert_allclose(m["util"], np.maximum(m["in_bps"], m["out_bps"]) / speed, rtol=1e-5)
    # queue / ECN / PFC counters: counts exact (rate × device interval gives back the delta)
    a, b = tw.true_queue(switch, t1), tw.true_queue(switch, t2)
    for metric, leaves, scale in (
        ("ecn_marked_ps", ("q_ecn_marked_pkts",), 1.0),
        ("drops_ps", ("q_dropped_pkts",), 1.0),
        ("pfc_pause_ps", ("pfc_tx_frames", "pfc_rx_frames"), 1.0),
    ):
        for leaf in leaves:
            assert device_ts(cur, leaf) == t2
            np.testing.assert_array_equal(cur.values[LEAF_INDEX[leaf]], b[leaf])
        count = sum((b[k] - a[k]).astype(np.float64) for k in leaves)
        np.testing.assert_allclose(m[metric], count / dt, rtol=0.01, atol=1e-3, err_msg=metric)
        np.testing.assert_array_equal(np.round(m[metric].astype(np.float64) * dt / scale), count)
    paused_us = np.maximum((b["pfc_tx_duration_us"] - a["pfc_tx_duration_us"]).astype(np.float64),
                           (b["pfc_rx_duration_us"] - a["pfc_rx_duration_us"]).astype(np.float64))
    np.testing.assert_allclose(m["pfc_paused_fraction"], paused_us / 1e6 / dt, rtol=0.01, atol=1e-6)
    # watermark: max occupancy over the interval's reads = over [previous read, last read]
    w1, w2 = device_ts(prev, "q_max_len"), device_ts(cur, "q_max_len")
    np.testing.assert_allclose(m["watermark_bytes"], tw.true_watermark(switch, w1, w2), atol=1.0, rtol=0)


async def intervals(coll: GnmiCollector, tw: Twin, switch: str, n: int, every_s: float
                    ) -> list[dict[str, np.ndarray]]:
    s = coll.sessions[switch]
    assert await s.wait_synced(10)
    taker = IntervalTaker(s.arrays, tw.ports.speed_bps[tw.ports.slice_of(switch)])
    out = []
    for _ in range(n):
        await asyncio.sleep(every_s)
        prev = taker.prev
        m = taker.take()
        check_interval(tw, switch, prev, taker.prev, m)
        out.append(m)
    return out


def test_every_metric_matches_the_twin_truth_per_interval(twin: Twin) -> None:
    now = time.time_ns()
    hot_switch, hot = hot_port(twin, now - 1_000_000_000, now)
    spine = next(sw.name for sw in twin.fabric.switches if sw.role == "spine")

    async def main() -> list[dict[str, np.ndarray]]:
        coll = GnmiCollector([spec(twin, hot_switch, 0.2), spec(twin, spine, 0.2)], seed=11)
        coll.start()
        try:
            got = await intervals(coll, twin, hot_switch, 5, 0.45)
            await intervals(coll, twin, spine, 1, 0.45)
            return got
        finally:
            await coll.stop()

    got = asyncio.run(main())
    ecn = np.nansum([m["ecn_marked_ps"] for m in got], axis=0)
    assert ecn[hot] > 0  # the checks above compared real congestion, not zeros
    assert np.nanmax([m["pfc_pause_ps"] for m in got]) > 0
    assert twin.gnmi is not None
    assert twin.gnmi.servicers[hot_switch].max_active_streams == 1


def test_skewed_moe_hot_port_has_largest_watermark_and_ecn_of_its_rail_with_unremarkable_util(
    twin: Twin,
) -> None:
    """The must-show scenario: at 1 s the port facing the hot GPU is not a utilization outlier
    (far below any busy threshold, under 2× its rail's median), but its queue watermark and ECN
    marks are the largest of its rail by far."""
    now = time.time_ns()
    switch, hot = hot_port(twin, now - 1_000_000_000, now)
    host = twin.ports.host_facing[twin.ports.slice_of(switch)]

    async def main() -> dict[str, np.ndarray]:
        coll = GnmiCollector([spec(twin, switch, 1.0)], seed=13)
        coll.start()
        try:
            s = coll.sessions[switch]
            assert await s.wait_synced(10)
            taker = IntervalTaker(s.arrays, twin.ports.speed_bps[twin.ports.slice_of(switch)])
            ts0 = device_ts(taker.prev, "in_octets")
            while int(s.arrays.ts_ns[LEAF_INDEX["in_octets"]].max()) == ts0:  # the next 1 s sample
                await asyncio.sleep(0.02)
            prev = taker.prev
            m = taker.take()
            check_interval(twin, switch, prev, taker.prev, m)
            return m
        finally:
            await coll.stop()

    m = asyncio.run(main())
    util, wm, ecn = m["util"], m["watermark_bytes"], m["ecn_marked_ps"]
    others = np.delete(np.arange(len(util)), hot)
    print(f"{switch} port {hot}: util {util[hot]:.3f} (rail median {np.median(util[host]):.3f}), "
          f"watermark {wm[hot]:.0f} B (others max {wm[others].max():.0f}), "
          f"ECN {ecn[hot]:.0f}/s (others max {ecn[others].max():.0f})")
    assert int(np.argmax(wm)) == hot and wm[hot] >= 1.5e6  # at least ECN Kmax: a real queue
    assert int(np.argmax(ecn)) == hot and ecn[hot] > 0
    assert wm[hot] > 10 * wm[others].max() and ecn[hot] > 10 * ecn[others].max()
    assert util[hot] < 0.3  # a utilization view at 1 s would not flag it
    assert util[hot] < 2.0 * np.median(util[host])


def test_restart_on_the_same_port_resumes_within_backoff_with_one_subscription(twin: Twin) -> None:
    """The twin's target for one switch dies and comes back on its port: the session resumes
    within backoff_max + one interval (a bounded wait, printed), never two streams at once, and
    the first interval after it matches the truth again."""
    assert twin.gnmi is not None
    switch = "leaf-r2"
    sv = twin.gnmi.servicers[switch]
    backoff_max, interval = 0.8, 0.2

    async def main() -> float:
        coll = GnmiCollector([spec(twin, switch, interval, backoff_max_s=backoff_max, backoff_base_s=0.1)],
                             seed=17)
        coll.start()
        s = coll.sessions[switch]
        try:
            assert await s.wait_synced(10)
            port = twin.gnmi_ports[switch]
            twin.gnmi.stop_switch(switch)  # type: ignore[union-attr]
            await asyncio.sleep(1.2)
            assert not s.health()["up"] and s.health()["errors"] >= 1
            assert twin.gnmi.start_switch(switch) == port  # type: ignore[union-attr]
            t0 = time.monotonic()
            assert await s.wait_synced(backoff_max + interval + 3.0), "no sync after the restart"
            resumed = time.monotonic() - t0
            await intervals(coll, twin, switch, 2, 0.45)  # truth per interval after the restart
            return resumed
        finally:
            await coll.stop()

    resumed = asyncio.run(main())
    print(f"resumed {resumed:.3f} s after the restart (bound {backoff_max + interval:.1f} s)")
    assert sv.max_active_streams == 1 and sv.subscribes >= 2


def test_malformed_responses_from_the_twin_are_counted_and_skipped(twin: Twin) -> None:
    """Garbage after every real notification of one switch: counted by kind, the stream stays up,
    the real values keep matching the truth; the other switch's session sees none of it."""
    assert twin.gnmi is not None
    bad, good = "leaf-r1", "leaf-r3"
    twin.gnmi.servicers[bad].mangle = malformed_after

    async def main() -> tuple[dict, dict]:
        coll = GnmiCollector([spec(twin, bad, 0.2), spec(twin, good, 0.2)], seed=19)
        coll.start()
        try:
            await intervals(coll, twin, bad, 2, 0.45)
            return coll.sessions[bad].health(), coll.sessions[good].health()
        finally:
            await coll.stop()

    try:
        hb, hg = asyncio.run(main())
    finally:
        twin.gnmi.servicers[bad].mangle = None
    assert hb["up"] and hb["reconnects"] == 0
    for kind in ("wrong_type", "unknown_path", "huge_value", "missing_timestamp", "error_response",
                 "empty_response"):
        assert hb["error_counts"][f"bad_{kind}"] > 0, kind
    assert hg["errors"] == 0 and hg["error_counts"] == {}
