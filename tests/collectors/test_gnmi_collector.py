"""The gNMI collector against the twin's real gRPC targets on loopback.

[QueueCounterSource] ── GnmiFabric (grpc.aio, 127.0.0.1:0) ══ Subscribe STREAM ══▶ GnmiCollector
      ground truth: every read the target served, by device timestamp
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import numpy as np
import pytest
from pygnmi.spec.v080 import gnmi_pb2 as pb

from collectors.gnmi.metrics import IntervalTaker, snapshot
from collectors.gnmi.paths import LEAF_INDEX
from collectors.gnmi.session import GnmiCollector, GnmiTargetSpec
from twin.gnmi_sources import QueueCounterSource
from twin.gnmi_target import GnmiFabric

pytestmark = pytest.mark.integration

SPEED = 400e9
PORTS = tuple(f"Ethernet{i}" for i in range(6))
INTERVAL_S = 0.1


def schedule(k: int) -> np.ndarray:
    """Bursty arrivals in bytes/s: port 0 an incast (2× line rate) every other 5 ms phase."""
    on = k % 2 == 0
    return np.array([100e9 if on else 0.0, 20e9, 55e9 if on else 10e9, 0.0, 45e9, 49e9])


def source(base: int = 10**12) -> QueueCounterSource:
    return QueueCounterSource(PORTS, np.full(len(PORTS), SPEED), schedule, base=base)


@pytest.fixture
def fabric() -> Iterator[GnmiFabric]:
    fab = GnmiFabric({"leaf-a": source(), "leaf-b": source(base=7)}).start()
    yield fab
    fab.stop()


def spec(fab: GnmiFabric, name: str, **kw: float) -> GnmiTargetSpec:
    return GnmiTargetSpec(name, "127.0.0.1", fab.ports[name], PORTS, sample_interval_s=INTERVAL_S, **kw)


def truth(src: QueueCounterSource, prev, cur, key: str) -> np.ndarray:
    """Counter delta per port between the device reads the collector's values came from."""
    r = LEAF_INDEX[key]
    out = np.zeros(len(PORTS))
    for p in range(len(PORTS)):
        a = src.at(int(prev.ts_ns[r, p]))[key][p]
        b = src.at(int(cur.ts_ns[r, p]))[key][p]
        assert a == prev.values[r, p] and b == cur.values[r, p]  # decode kept the exact uint64
        out[p] = float(b - a)
    return out


def check_interval(src: QueueCounterSource, prev, cur, m: dict[str, np.ndarray]) -> None:
    r = LEAF_INDEX["in_octets"]
    dt = (cur.ts_ns[r] - prev.ts_ns[r]) / 1e9
    assert np.all(dt > 0)
    for metric, key, scale in [
        ("in_bps", "in_octets", 8.0),
        ("out_bps", "out_octets", 8.0),
        ("ecn_marked_ps", "q_ecn_marked_pkts", 1.0),
        ("drops_ps", "q_dropped_pkts", 1.0),
        ("out_discards_ps", "out_discards", 1.0),
    ]:
        want = truth(src, prev, cur, key) * scale / dt
        np.testing.assert_allclose(m[metric], want, rtol=0.01, atol=1e-3, err_msg=metric)
        # counts exact: the float32 rate × the device interval gives back the integer delta
        np.testing.assert_allclose(
            np.round(m[metric].astype(np.float64) * dt / scale), truth(src, prev, cur, key), rtol=1e-6
        )
    frames = truth(src, prev, cur, "pfc_tx_frames") + truth(src, prev, cur, "pfc_rx_frames")
    np.testing.assert_allclose(m["pfc_pause_ps"], frames / dt, rtol=0.01)
    paused = (
        np.maximum(truth(src, prev, cur, "pfc_tx_duration_us"), truth(src, prev, cur, "pfc_rx_duration_us"))
        / 1e6
        / dt
    )
    np.testing.assert_allclose(m["pfc_paused_fraction"], paused, rtol=0.01, atol=1e-6)
    np.testing.assert_allclose(m["util"], np.maximum(m["in_bps"], m["out_bps"]) / SPEED, rtol=1e-6)
    w = LEAF_INDEX["q_max_len"]
    assert len(set(prev.ts_ns[w])) == 1 and len(set(cur.ts_ns[w])) == 1
    want_wm = src.peak_between(int(prev.ts_ns[w, 0]), int(cur.ts_ns[w, 0]))
    np.testing.assert_array_equal(m["watermark_bytes"], want_wm.astype(np.float32))


async def collect_intervals(
    coll: GnmiCollector, name: str, src: QueueCounterSource, n: int
) -> list[dict[str, np.ndarray]]:
    s = coll.sessions[name]
    assert await s.wait_synced(10)
    taker = IntervalTaker(s.arrays, np.full(len(PORTS), SPEED))
    out = []
    for _ in range(n):
        await asyncio.sleep(0.35)
        prev = taker.prev
        m = taker.take()
        check_interval(src, prev, taker.prev, m)
        out.append(m)
    return out


def test_every_metric_matches_the_twin_per_interval(fabric: GnmiFabric) -> None:
    async def main() -> list[dict[str, np.ndarray]]:
        coll = GnmiCollector([spec(fabric, "leaf-a"), spec(fabric, "leaf-b")], seed=3)
        coll.start()
        try:
            return await collect_intervals(coll, "leaf-a", fabric.servicers["leaf-a"].source, 4)  # type: ignore[arg-type]
        finally:
            await coll.stop()

    intervals = asyncio.run(main())
    last = intervals[-1]
    # the incast port: queue at Xoff (PFC), ECN marking, pauses; the quiet ports: none of it
    assert last["watermark_bytes"][0] == pytest.approx(2e6)
    assert last["ecn_marked_ps"][0] > 0 and last["pfc_pause_ps"][0] > 0
    assert last["ecn_marked_ps"][1] == 0 and last["watermark_bytes"][1] == 0
    assert fabric.servicers["leaf-a"].max_active_streams == 1


def test_restart_on_same_port_resumes_within_backoff_without_duplicate_subscription(
    fabric: GnmiFabric,
) -> None:
    backoff_max = 0.8

    async def main() -> tuple[float, dict[str, np.ndarray], dict[str, np.ndarray]]:
        coll = GnmiCollector([spec(fabric, "leaf-a", backoff_max_s=backoff_max, backoff_base_s=0.1)], seed=5)
        coll.start()
        s = coll.sessions["leaf-a"]
        try:
            assert await s.wait_synced(10)
            taker = IntervalTaker(s.arrays, np.full(len(PORTS), SPEED))
            await asyncio.sleep(0.3)
            taker.take()
            port = fabric.ports["leaf-a"]
            fabric.stop_switch("leaf-a")
            await asyncio.sleep(1.5)  # several failed reconnects: backoff grows, capped
            assert not s.health()["up"] and s.health()["errors"] >= 2
            new = source(base=5)  # changed data: counters went down (a restarted device)
            fabric.servicers["leaf-a"].source = new
            assert fabric.start_switch("leaf-a") == port
            t0 = time.monotonic()
            ts_before = int(s.arrays.ts_ns.max())
            # bounded wait (not a timing assert): data must be back within backoff_max + one interval
            while int(s.arrays.ts_ns.max()) == ts_before:
                assert time.monotonic() - t0 < backoff_max + INTERVAL_S + 2.0, "no data after restart"
                await asyncio.sleep(0.01)
            resumed_s = time.monotonic() - t0
            across = taker.take()  # spans the restart: counters went down → NaN, never negative
            await asyncio.sleep(0.35)
            prev = taker.prev
            after = taker.take()
            check_interval(new, prev, taker.prev, after)
            return resumed_s, across, after
        finally:
            await coll.stop()

    resumed_s, across, after = asyncio.run(main())
    print(f"resumed {resumed_s:.3f} s after restart (bound {backoff_max + INTERVAL_S:.1f} s + grace)")
    for k in ("in_bps", "out_bps", "ecn_marked_ps", "pfc_pause_ps"):
        assert not np.any(across[k] < 0)
        assert np.all(np.isnan(across[k]) | np.isfinite(across[k]))
    assert np.all(np.isnan(across["out_bps"]))  # reset detected, not a spike
    assert np.all(np.isfinite(after["out_bps"]))
    sv = fabric.servicers["leaf-a"]
    assert sv.max_active_streams == 1 and sv.subscribes >= 2
    deadline = time.monotonic() + 5  # the server notices the client's cancel asynchronously
    while sv.active_streams and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sv.active_streams == 0


def garbage(resp: pb.SubscribeResponse) -> list[pb.SubscribeResponse]:
    """Keep the real response, and add one of every kind of bad input after it."""
    if not resp.HasField("update") or not len(resp.update.update):
        return [resp]
    real = resp.update
    first = real.update[0]
    bad = pb.SubscribeResponse()
    bad.update.timestamp = real.timestamp + 1
    u = bad.update.update.add()  # wrong type for a counter
    u.path.CopyFrom(first.path)
    u.val.string_val = "lots"
    u = bad.update.update.add()  # unknown path
    u.path.elem.add(name="no-such-leaf")
    u.val.uint_val = 1
    u = bad.update.update.add()  # huge value
    u.path.CopyFrom(first.path)
    u.val.uint_val = (1 << 64) - 1
    no_ts = pb.SubscribeResponse()
    no_ts.update.update.add().CopyFrom(first)  # missing timestamp
    err = pb.SubscribeResponse()
    err.error.code = 13
    err.error.message = "garbage"
    return [resp, bad, no_ts, err, pb.SubscribeResponse()]


def test_malformed_responses_are_counted_and_skipped_others_unaffected(fabric: GnmiFabric) -> None:
    fabric.servicers["leaf-a"].mangle = garbage

    async def main() -> None:
        coll = GnmiCollector([spec(fabric, "leaf-a"), spec(fabric, "leaf-b")], seed=7)
        coll.start()
        try:
            sa, sb = coll.sessions["leaf-a"], coll.sessions["leaf-b"]
            await collect_intervals(coll, "leaf-b", fabric.servicers["leaf-b"].source, 2)  # type: ignore[arg-type]
            assert await sa.wait_synced(5)
            prev = snapshot(sa.arrays)
            await asyncio.sleep(0.4)
            cur = snapshot(sa.arrays)
            ha, hb = sa.health(), sb.health()
            assert ha["up"] and ha["reconnects"] == 0  # garbage never drops the stream
            for kind in (
                "wrong_type",
                "unknown_path",
                "huge_value",
                "missing_timestamp",
                "error_response",
                "empty_response",
            ):
                assert ha["error_counts"][f"bad_{kind}"] > 0, kind
            assert hb["errors"] == 0 and hb["error_counts"] == {}
            # the real values around the garbage are kept: counters still advance, sane
            r = LEAF_INDEX["in_octets"]
            assert np.all(cur.values[r] >= prev.values[r]) and np.all(cur.values[r] < 1 << 63)
            src_a = fabric.servicers["leaf-a"].source
            for p in range(len(PORTS)):
                assert src_a.at(int(cur.ts_ns[r, p]))["in_octets"][p] == cur.values[r, p]  # type: ignore[attr-defined]
        finally:
            await coll.stop()

    asyncio.run(main())


def test_one_cancel_stops_a_session_whatever_it_is_awaiting(fabric: GnmiFabric) -> None:
    """A session ends on one cancel, even one that races a message that has just arrived.

    On Python 3.11 ``asyncio.wait_for`` returns the inner result and drops a cancel that lands
    after the inner await completed (cpython gh-86296); the session then read on for ever, and
    asyncio.run's shutdown in CI waited on it until the 300 s timeout. A garbage-heavy fast
    stream makes messages arrive nearly back to back, so cancels at random instants hit that
    window; each one must still end the task.
    """
    fabric.servicers["leaf-a"].mangle = garbage
    rng = np.random.default_rng(11)

    async def main() -> list[int]:
        s = GnmiCollector([GnmiTargetSpec("leaf-a", "127.0.0.1", fabric.ports["leaf-a"], PORTS, sample_interval_s=0.01)], seed=3).sessions["leaf-a"]
        survived = []
        for i in range(CANCEL_TRIES):
            task = asyncio.get_running_loop().create_task(s.run())
            if i == 0:
                assert await s.wait_synced(10)
            await asyncio.sleep(float(rng.uniform(0.0, 0.05)))
            task.cancel()  # once: stop() re-sends cancels, but a lost one is still a bug
            done, _ = await asyncio.wait({task}, timeout=3.0)
            if not done:
                survived.append(i)
                while not task.done():
                    task.cancel()
                    await asyncio.wait({task}, timeout=0.5)
        return survived

    assert asyncio.run(main()) == []


CANCEL_TRIES = 150


def test_a_silent_target_is_marked_down_at_stale_and_resubscribed_only_when_dead(fabric: GnmiFabric) -> None:
    """A target that stops sending for longer than ``stale_after_s`` (a busy control plane) is down
    for that long and back up on its next message, on the same stream: no re-subscribe, so no full
    snapshot to build on the CPU that was short. Silent past ``dead_after_s``, it is re-subscribed."""
    silent = {"on": False}
    fabric.servicers["leaf-a"].mangle = lambda resp: () if silent["on"] else (resp,)

    async def main() -> dict[str, object]:
        coll = GnmiCollector([spec(fabric, "leaf-a", stale_after_s=0.6, dead_after_s=3.0)], seed=2)
        coll.start()
        s = coll.sessions["leaf-a"]
        seen: dict[str, object] = {}
        try:
            assert await s.wait_synced(10)
            silent["on"] = True
            await asyncio.sleep(1.5)  # past stale, short of dead
            seen["during"] = s.health()
            silent["on"] = False
            await asyncio.sleep(0.5)
            seen["after"] = s.health()
            silent["on"] = True
            await asyncio.sleep(4.0)  # past dead: the stream is given up and re-subscribed
            silent["on"] = False
            t0 = time.monotonic()
            while not s.health()["up"]:
                assert time.monotonic() - t0 < 10, "no data after the re-subscribe"
                await asyncio.sleep(0.05)
            seen["revived"] = s.health()
            return seen
        finally:
            await coll.stop()

    seen = asyncio.run(main())
    during, after, revived = seen["during"], seen["after"], seen["revived"]
    assert not during["up"] and during["last_error"].startswith("stale")  # type: ignore[index]
    assert during["subscriptions"] == 1 and during["reconnects"] == 0  # type: ignore[index]
    assert after["up"] and after["reconnects"] == 0  # type: ignore[index]
    assert after["error_counts"] == {"stale": 1}  # type: ignore[index]
    assert revived["reconnects"] == 1 and revived["error_counts"]["dead"] == 1  # type: ignore[index]
    sv = fabric.servicers["leaf-a"]
    assert sv.subscribes == 2 and sv.max_active_streams == 1


def test_the_subscription_asks_for_exactly_the_counters_the_frame_metrics_read() -> None:
    """A collector subscribes to SAMPLED_KEYS, not every counter a target offers: decoding the rest
    was a quarter of a 16,896-port stream's updates for nothing. Every frame metric comes out of
    those leaves alone (a leaf left out would give a metric of NaN), and dropping any one of them
    leaves some metric without data."""
    from collectors.gnmi.decode import TargetArrays
    from collectors.gnmi.metrics import GNMI_METRICS, SAMPLED_KEYS, interval_metrics
    from collectors.gnmi.paths import LEAVES
    from collectors.gnmi.session import subscribe_request

    req = subscribe_request(GnmiTargetSpec("leaf", "127.0.0.1", 1, PORTS))
    sampled = [s for s in req.subscribe.subscription if s.mode == pb.SAMPLE]
    names = {"/".join(e.name for e in s.path.elem) for s in sampled}
    want = {"/".join(n for n, _ in LEAVES[LEAF_INDEX[k]].elems) for k in SAMPLED_KEYS}
    assert names == want and len(sampled) == len(SAMPLED_KEYS)

    def metrics_with(keys: tuple[str, ...], order: int) -> dict[str, np.ndarray]:
        arrays = TargetArrays(PORTS)
        snaps = []
        for t, step in ((10**18, 0), (10**18 + 10**9, 1)):
            for k in keys:  # each leaf its own delta, rising or falling along the keys
                rank = SAMPLED_KEYS.index(k) if order > 0 else len(SAMPLED_KEYS) - SAMPLED_KEYS.index(k)
                arrays.values[LEAF_INDEX[k]] = 1_000 + step * 100 * (rank + 1)
                arrays.ts_ns[LEAF_INDEX[k]] = t
                arrays.peak[LEAF_INDEX[k]] = 1_000 + step * 100 * (rank + 1)
            snaps.append(snapshot(arrays))
        return interval_metrics(snaps[0], snaps[1], np.full(len(PORTS), SPEED))

    def differs(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
        return any(not np.array_equal(a[m], b[m], equal_nan=True) for m in a)

    for order in (1, -1):
        full = metrics_with(SAMPLED_KEYS, order)
        assert set(full) == set(GNMI_METRICS)
        assert all(np.isfinite(v).all() for v in full.values()), full
    for k in SAMPLED_KEYS:  # a leaf no metric reads would not be worth its updates
        fewer = tuple(x for x in SAMPLED_KEYS if x != k)
        assert any(differs(metrics_with(fewer, o), metrics_with(SAMPLED_KEYS, o)) for o in (1, -1)), k
