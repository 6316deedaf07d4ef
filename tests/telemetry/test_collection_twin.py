"""The collector against the twin over real UDP: accuracy, faults, health, frames.

    twin (UDP agents, ground truth) ◀──SNMP── run_shard x 2 shards ──▶ Redis: slices → frames, health
"""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
from telemetry_harness import INTERVAL_S, collector_spec, run_collectors

from fabricmon.telemetry import live_window
from fabricmon.telemetry.framing import FabricFramer

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def _wait_for(predicate, timeout_s: float, step_s: float = 0.1) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step_s)
    return predicate()


def _frames(redis_client, fabric: str) -> dict[int, object]:
    return {f.ts_ns: f for _, f in live_window.read_window(redis_client, fabric)}


def test_measured_rates_match_twin_truth_within_one_percent(twin_process, redis_url, redis_client,
                                                            settings) -> None:
    """The issue's main test: every port's rate, interval by interval, against the twin's truth.

    The criterion: over the whole run (>= 10 back-to-back intervals) each port's mean measured
    rate is within 1 % of the truth over the same span (measured: ~0.1 %) — no byte lost, counted
    twice or mis-timed on average.

    Interval by interval, MoE traffic is bursty (line rate for a phase, idle between), so jitter in
    *when* the agent read its counters moves one 1 s rate by (edge rate x jitter / interval). The
    agent's scheduling jitter on a loaded 2-core box is ~1-10 ms, occasionally 20+ ms under the
    parallel suite: 0.3-1 % of line rate typical, rarely 2-5 %. No collector can remove that with
    client-side timestamps (sysUpTime has 10 ms resolution), so per interval we require >= 90 % of
    samples within 1 % of line rate and all within 5 % (a lost wrap or double count is >= 100 %).
    """
    settings.FABRICMON_SHARD_SIZE = 3  # 6 switches → 2 shards on 2 collectors
    spec = collector_spec(twin_process.fabric, interval_s=1.0, timeout_s=0.3)
    framer = FabricFramer(spec, window_s=60)
    with run_collectors([spec], [f"{spec.name}:0", f"{spec.name}:1"], redis_url) as c:
        assert _wait_for(lambda: len(c.by_switch()) == 6 and min(
            sum(r.slice.ok for r in recs) for recs in c.by_switch().values()) >= 11, 25)
    frames = _frames(redis_client, spec.name)
    checked = within_1pct_lr = 0
    for switch, recs in c.by_switch().items():
        ok = [r for r in recs if r.slice.ok]
        assert len(ok) >= 10, f"{switch}: only {len(ok)} measured intervals"
        sl = framer.slices[switch]
        speed = framer.index.speed_bps[sl]
        measured_bits = {"in_bps": np.zeros(len(speed)), "out_bps": np.zeros(len(speed))}
        for rec in ok:
            truth = twin_process.true_rates(switch, rec.slice.t_prev_ns, rec.slice.t_cur_ns)
            for metric, true_name in (("in_bps", "in_octets_per_s"), ("out_bps", "out_octets_per_s")):
                measured = rec.slice.metrics[metric].astype(np.float64)
                expected = truth[true_name] * 8
                err = np.abs(measured - expected)
                worst = int(np.argmax(err))
                assert (err <= 0.05 * speed).all(), (
                    f"{switch} port {worst} {metric}: measured {measured[worst]:.6g}, truth {expected[worst]:.6g}")
                within_1pct_lr += int((err <= 0.01 * speed).sum())
                measured_bits[metric] += measured * (rec.slice.t_cur_ns - rec.slice.t_prev_ns) / 1e9
                checked += len(measured)
            # The frame of that tick carries exactly this measurement.
            frame = frames.get(rec.frame_tick_ns)
            if frame is not None:
                np.testing.assert_array_equal(frame.metrics["in_bps"][sl], rec.slice.metrics["in_bps"])
        # Back to back: each sample starts where the previous ended, so the run telescopes.
        assert all(a.slice.t_cur_ns == b.slice.t_prev_ns for a, b in itertools.pairwise(ok))
        t1, t2 = ok[0].slice.t_prev_ns, ok[-1].slice.t_cur_ns
        truth = twin_process.true_rates(switch, t1, t2)
        for metric, true_name in (("in_bps", "in_octets_per_s"), ("out_bps", "out_octets_per_s")):
            mean = measured_bits[metric] / ((t2 - t1) / 1e9)
            expected = truth[true_name] * 8
            np.testing.assert_allclose(mean, expected, rtol=0.01, atol=1e-6 * speed[0],
                                       err_msg=f"{switch} {metric} over {len(ok)} intervals")
    assert checked >= 6 * 10 * 2
    assert within_1pct_lr >= 0.9 * checked, f"only {within_1pct_lr}/{checked} samples within 1 % of line rate"
    busy = [f for f in frames.values() if np.isfinite(f.metrics["util"]).all()]
    assert len(busy) >= 9 and max(float(np.nanmax(f.metrics["util"])) for f in busy) > 0.01


def test_restart_and_wrap_give_marked_gaps_never_negative_or_above_line_rate(
        twin_process, redis_url, redis_client, settings) -> None:
    settings.FABRICMON_SHARD_SIZE = 6
    spec = collector_spec(twin_process.fabric)
    framer = FabricFramer(spec, window_s=60)
    restarted, wrapped = "leaf-r0", "leaf-r1"
    with run_collectors([spec], [f"{spec.name}:0"], redis_url) as c:
        assert _wait_for(lambda: sum(r.slice.ok for r in c.by_switch().get(restarted, [])) >= 3, 10)
        t_fault = time.time_ns()
        twin_process.restart(restarted)
        twin_process.wrap(wrapped, seconds_to_wrap=1.2)  # jump below 2^64, then a natural wrap
        assert _wait_for(lambda: sum(r.slice.ok and r.started_ns > t_fault + 3 * 10**9
                                     for r in c.by_switch().get(wrapped, [])) >= 2, 12)
    for switch in (restarted, wrapped):
        recs = [r for r in c.by_switch()[switch] if r.slice.t_cur_ns > t_fault]
        speed = framer.index.speed_bps[framer.slices[switch]]
        values = np.stack([r.slice.metrics["in_bps"] for r in recs] + [r.slice.metrics["out_bps"] for r in recs])
        finite = values[np.isfinite(values)]
        assert (finite >= 0).all(), f"{switch}: negative rate after the fault"
        assert (values <= np.tile(speed, (len(values), 1)) * 1.05).sum() == finite.size, f"{switch}: above line rate"
        gaps = [r for r in recs if np.isnan(r.slice.metrics["in_bps"]).all()]
        assert gaps, f"{switch}: the affected sample is not marked as a gap"
        assert recs[-1].slice.ok and np.isfinite(recs[-1].slice.metrics["in_bps"]).all(), f"{switch}: no recovery"
    health = live_window.read_health(redis_client, spec.name)
    assert health[restarted]["dropped"].get("uptime_drop", 0) > 0
    assert health[wrapped]["dropped"].get("discontinuity", 0) + health[wrapped]["dropped"].get("reset_decrease", 0) > 0


def test_unreachable_switch_does_not_delay_the_others(twin_process, redis_url, redis_client, settings) -> None:
    settings.FABRICMON_SHARD_SIZE = 6  # dead and healthy switches in the same loop
    spec = collector_spec(twin_process.fabric)
    framer = FabricFramer(spec, window_s=60)
    dead = "spine0"
    twin_process.set_unreachable(dead)
    with run_collectors([spec], [f"{spec.name}:0"], redis_url) as c:
        assert _wait_for(lambda: len(c.by_switch().get(dead, [])) >= 8, 15)
    interval_ns = round(INTERVAL_S * 1e9)
    for switch, recs in c.by_switch().items():
        if switch == dead:
            assert all(r.error_kind == "timeout" for r in recs)
            continue
        # Every scheduled tick was polled (none skipped) and each poll finished before the next tick.
        scheduled = [r.scheduled_ns for r in recs]
        assert np.all(np.diff(scheduled) == interval_ns), f"{switch} skipped a tick"
        assert all(r.error_kind is None for r in recs)
        assert all(r.finished_ns < r.scheduled_ns + interval_ns for r in recs)
    frames = list(_frames(redis_client, spec.name).values())
    assert len(frames) >= 5
    dead_sl = framer.slices[dead]
    alive = np.ones(len(framer.index), bool)
    alive[dead_sl] = False
    assert all(np.isnan(f.metrics["in_bps"][dead_sl]).all() for f in frames)
    assert sum(np.isfinite(f.metrics["in_bps"][alive]).all() for f in frames) >= 4
    health = live_window.read_health(redis_client, spec.name)
    assert health[dead]["up"] is False and health[dead]["error_counts"]["timeout"] >= 5
    assert health[dead]["consecutive_failures"] >= 5 and "timeout" in health[dead]["last_error"]
    assert all(health[s]["up"] for s in framer.index.switch_names if s != dead)
