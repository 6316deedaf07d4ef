"""Counter-rate maths: golden cases, the Prometheus reset vectors, and Hypothesis sequences with
wraps, resets, gaps and agent restarts (reliability.md goal G6)."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabricmon.core.telemetry.rates import (
    CounterRead,
    CounterUnit,
    RateReason,
    align_ports,
    as_counter_array,
    counter_rates,
    prometheus_increase,
)

G = 1_000_000_000
SPEED_100G = np.array([100e9, 100e9, 100e9])


def read(ts_s: float, values: list[int] | None, **kw: object) -> CounterRead:
    return CounterRead(ts_ns=int(ts_s * G), values=None if values is None else as_counter_array(values), **kw)  # type: ignore[arg-type]


# --- golden cases ---------------------------------------------------------------------------


def test_exact_counter64_near_2_to_the_64() -> None:
    top = 2**64 - 1
    r = counter_rates(read(0, [top - 1000, top - 7, 2**63]), read(1, [top, top, 2**63 + 1]), SPEED_100G)
    assert r.delta.tolist() == [1000.0, 7.0, 1.0]  # float64 of the raw values would give 0 or 2048
    assert (r.reason == RateReason.OK).all()


def test_64bit_decrease_is_a_reset_not_a_wrap() -> None:
    r = counter_rates(read(0, [2**64 - 5, 100, 50]), read(1, [3, 200, 50]), SPEED_100G)
    assert r.reason.tolist() == [RateReason.RESET_DECREASE, RateReason.OK, RateReason.OK]
    assert np.isnan(r.rate_per_s[0]) and r.rate_per_s[1] == 100.0 and r.rate_per_s[2] == 0.0


def test_32bit_counter_wraps_once() -> None:
    r = counter_rates(
        read(0, [2**32 - 10, 7, 2**32]), read(1, [5, 9, 1]), SPEED_100G, width_bits=32, unit="packets"
    )
    assert r.delta[0] == 15.0 and r.delta[1] == 2.0  # Prometheus would say 5 for port 0
    assert r.reason[2] == RateReason.BAD_VALUE


def test_uptime_drop_drops_every_port() -> None:
    r = counter_rates(
        read(0, [10, 10, 10], sys_uptime_ticks=500_000),
        read(1, [20, 30, 40], sys_uptime_ticks=100),
        SPEED_100G,
    )
    assert (r.reason == RateReason.UPTIME_DROP).all() and np.isnan(r.rate_per_s).all()


def test_discontinuity_change_drops_that_port() -> None:
    d0 = np.array([0, 0, 0], dtype=np.int64)
    d1 = np.array([0, 4711, 0], dtype=np.int64)
    r = counter_rates(
        read(0, [10, 10, 10], discontinuity_ticks=d0),
        read(1, [20, 30, 40], discontinuity_ticks=d1),
        SPEED_100G,
    )
    assert r.reason.tolist() == [RateReason.OK, RateReason.DISCONTINUITY, RateReason.OK]


def test_above_line_rate_is_dropped_and_unknown_speed_is_not_checked() -> None:
    speed = np.array([8e9, 8e9, 0.0])  # 1 GB/s ceiling (x1.05), then unknown speed
    r = counter_rates(read(0, [0, 0, 0]), read(1, [10**9, 2 * 10**9, 10**15]), speed)
    assert r.reason.tolist() == [RateReason.OK, RateReason.ABOVE_LINE_RATE, RateReason.OK]


def test_failed_poll_is_a_gap_not_a_carried_value() -> None:
    r = counter_rates(read(0, [1, 2, 3]), read(1, None), SPEED_100G)
    assert (r.reason == RateReason.GAP).all() and np.isnan(r.rate_per_s).all()
    r = counter_rates(read(1, None), read(2, [5, 6, 7]), SPEED_100G)
    assert (r.reason == RateReason.GAP).all()


def test_absent_port_is_a_gap_and_time_must_advance() -> None:
    present = np.array([True, False, True])
    r = counter_rates(read(0, [1, 2, 3]), read(1, [2, 0, 4], present=present), SPEED_100G)
    assert r.reason.tolist() == [RateReason.OK, RateReason.GAP, RateReason.OK]
    r = counter_rates(read(1, [1, 2, 3]), read(1, [2, 3, 4]), SPEED_100G)
    assert (r.reason == RateReason.BAD_INTERVAL).all()
    assert r.counts() == {"bad_interval": 3}


def test_mismatched_lengths_name_the_problem() -> None:
    with pytest.raises(ValueError, match="2 ports, speed_bps has 3"):
        counter_rates(read(0, [1, 2]), read(1, [1, 2]), SPEED_100G)


def test_align_ports_marks_missing_ports() -> None:
    vals = as_counter_array([2**64 - 1, 20, 30])
    out, present = align_ports([3, 1, 2], vals, [1, 2, 3, 9])
    assert out.tolist() == [20, 30, 2**64 - 1, 0] and present.tolist() == [True, True, True, False]
    out, present = align_ports([], as_counter_array([]), [1])
    assert present.tolist() == [False]


# --- Prometheus, for comparison ---------------------------------------------------------------


def test_prometheus_reset_vector_0_1_2_3_2_3_4_gives_7() -> None:
    ts = [i * 300.0 for i in range(7)]
    vals = [0, 1, 2, 3, 2, 3, 4]
    assert prometheus_increase(ts, vals, 0.0, 1800.0) == pytest.approx(7.0)
    # fabricmon drops the 3 -> 2 interval instead of assuming "restarted at 0 and counted to 2".
    deltas = [
        counter_rates(read(ts[i], [vals[i]]), read(ts[i + 1], [vals[i + 1]]), np.array([0.0])).delta[0]
        for i in range(6)
    ]
    assert np.nansum(deltas) == 5.0 and np.isnan(deltas[3])


def test_prometheus_linear_counter_and_empty_range() -> None:
    ts = [i * 300.0 for i in range(11)]
    assert prometheus_increase(ts, [10.0 * i for i in range(11)], 0.0, 3000.0) == pytest.approx(100.0)
    assert prometheus_increase(ts, [1.0] * 11, 10.0, 200.0) is None


# --- property: random histories never yield a negative, an over-line-rate or a spiked rate ----

STEP = st.fixed_dictionaries(
    {
        "dt_s": st.floats(0.05, 5.0),
        "load": st.lists(st.floats(0.0, 1.0), min_size=3, max_size=3),
        "event": st.sampled_from(["none", "none", "none", "gap", "port_reset", "restart"]),
        "port": st.integers(0, 2),
        "reset_to": st.integers(0, 2**40),
    }
)


@settings(max_examples=300, deadline=None)
@given(
    start=st.lists(st.integers(0, 2**64 - 1), min_size=3, max_size=3),
    steps=st.lists(STEP, min_size=1, max_size=25),
    reports_discontinuity=st.booleans(),
    width_bits=st.sampled_from([32, 64]),
)
def test_random_histories_never_negative_never_above_line_rate_never_spiked(
    start: list[int], steps: list[dict], reports_discontinuity: bool, width_bits: int
) -> None:
    modulus = 2**width_bits
    speed = SPEED_100G
    ceiling_per_bit = 1 / 8 if width_bits == 64 else 1 / 672
    counters = [v % modulus for v in start]
    uptime, disc, t = 10_000, [0, 0, 0], 100.0
    prev = CounterRead(int(t * G), as_counter_array(counters), uptime, np.array(disc, dtype=np.int64))
    for step in steps:
        t += step["dt_s"]
        uptime += max(1, int(step["dt_s"] * 100))
        true_inc = [int(f * speed[i] * ceiling_per_bit * step["dt_s"]) for i, f in enumerate(step["load"])]
        counters = [(c + d) % modulus for c, d in zip(counters, true_inc, strict=True)]
        undetectable = set()
        if step["event"] == "port_reset":
            p = step["port"]
            counters[p] = step["reset_to"] % modulus
            if reports_discontinuity:
                disc[p] = uptime
            else:
                undetectable.add(p)
        elif step["event"] == "restart":
            counters = [d % modulus for d in true_inc]
            if prev.sys_uptime_ticks:
                uptime = 0  # restarted: sysUpTime is now below the last read
            else:  # restarted twice within a few ticks: invisible to sysUpTime, like on a real agent
                undetectable.update(range(3))
            disc = [0, 0, 0]
        values = None if step["event"] == "gap" else as_counter_array(counters)
        cur = CounterRead(int(t * G), values, uptime, np.array(disc, dtype=np.int64))
        r = counter_rates(
            prev, cur, speed, width_bits=width_bits, unit="octets" if width_bits == 64 else "packets"
        )  # type: ignore[arg-type]
        ok = ~np.isnan(r.rate_per_s)
        assert (r.rate_per_s[ok] >= 0).all()
        assert (r.rate_per_s[ok] <= speed[ok] * ceiling_per_bit * 1.05 + 1e-9).all()
        assert (ok == (r.reason == RateReason.OK)).all()
        if step["event"] == "gap" or prev.values is None or (step["event"] == "restart" and not undetectable):
            assert not ok.any()
        for i in np.flatnonzero(ok):
            if i not in undetectable:
                assert r.delta[i] == true_inc[i], (i, step)  # no spike: exactly what was counted
        prev = cur


# --- per-port read times ----------------------------------------------------------------------


def test_per_port_timestamps_give_each_port_its_own_interval() -> None:
    prev = CounterRead(np.array([0, 0, 10], dtype=np.int64) * G // 10, as_counter_array([0, 0, 0]))
    cur = CounterRead(np.array([10, 20, 10], dtype=np.int64) * G // 10, as_counter_array([100, 100, 5]))
    r = counter_rates(prev, cur, SPEED_100G)
    assert r.rate_per_s[:2].tolist() == [100.0, 50.0] and r.interval_s.tolist() == [1.0, 2.0, 0.0]  # type: ignore[union-attr]
    assert r.reason.tolist() == [RateReason.OK, RateReason.OK, RateReason.BAD_INTERVAL]
    # a scalar on one side broadcasts; a wrong-length array names the problem
    r = counter_rates(CounterRead(0, as_counter_array([0, 0, 0])), cur, SPEED_100G)
    assert r.rate_per_s.tolist() == [100.0, 50.0, 5.0]
    with pytest.raises(ValueError, match="one per port"):
        counter_rates(CounterRead(np.zeros(2, np.int64), as_counter_array([0, 0, 0])), cur, SPEED_100G)


@settings(max_examples=200, deadline=None)
@given(
    t0_ns=st.lists(st.integers(1_600_000_000 * G, 1_700_000_000 * G), min_size=3, max_size=3),
    dt_ns=st.lists(st.integers(-(10**6), 5 * G), min_size=3, max_size=3),
    start=st.lists(st.integers(0, 2**64 - 1), min_size=3, max_size=3),
    load=st.lists(st.floats(0.0, 1.2), min_size=3, max_size=3),
    width_bits=st.sampled_from([32, 64]),
    present=st.lists(st.booleans(), min_size=3, max_size=3),
)
def test_per_port_dt_equals_each_port_computed_alone(
    t0_ns: list[int],
    dt_ns: list[int],
    start: list[int],
    load: list[float],
    width_bits: int,
    present: list[bool],
) -> None:
    """Vectorized per-port intervals give exactly what each port gets alone with scalar stamps;
    never negative, never above line rate over the port's own interval, and rate x dt = delta."""
    modulus = 2**width_bits
    unit: CounterUnit = "octets" if width_bits == 64 else "packets"
    width: Literal[32, 64] = 64 if width_bits == 64 else 32
    per_bit = 1 / 8 if width_bits == 64 else 1 / 672
    inc = [
        int(f * SPEED_100G[i] * per_bit * max(d, 0) / G)
        for i, (f, d) in enumerate(zip(load, dt_ns, strict=True))
    ]
    a = as_counter_array([v % modulus for v in start])
    b = as_counter_array([(v + d) % modulus for v, d in zip(start, inc, strict=True)])
    t1 = np.array(t0_ns, dtype=np.int64)
    t2 = t1 + np.array(dt_ns, dtype=np.int64)
    mask = np.array(present)
    r = counter_rates(
        CounterRead(t1, a), CounterRead(t2, b, present=mask), SPEED_100G, width_bits=width, unit=unit
    )
    for i in range(3):
        alone = counter_rates(
            CounterRead(int(t1[i]), a[i : i + 1]),
            CounterRead(int(t2[i]), b[i : i + 1], present=mask[i : i + 1]),
            SPEED_100G[i : i + 1],
            width_bits=width,
            unit=unit,
        )
        assert r.reason[i] == alone.reason[0]
        np.testing.assert_array_equal(r.rate_per_s[i : i + 1], alone.rate_per_s)
        np.testing.assert_array_equal(r.delta[i : i + 1], alone.delta)
    ok = r.reason == RateReason.OK
    dt_s = np.asarray(r.interval_s)
    assert (dt_s[ok] > 0).all() and (r.rate_per_s[ok] >= 0).all()
    assert (r.rate_per_s[ok] <= SPEED_100G[ok] * per_bit * 1.05 * (1 + 1e-12)).all()
    np.testing.assert_allclose(r.rate_per_s[ok] * dt_s[ok], r.delta[ok], rtol=1e-12)
    assert not ok[(dt_s <= 0) | ~mask].any()
