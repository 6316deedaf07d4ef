"""CounterClock: continuous piecewise-linear counters, truth by integration, wraps, bounded history."""

from __future__ import annotations

import numpy as np
import pytest

from twin.counters import METRICS, CounterClock

NS = 1_000_000_000


def _clock(capacity: int = 100) -> CounterClock:
    return CounterClock(2, 0, np.zeros((2, len(METRICS)), dtype=np.uint64), capacity)


def _rates(a: float, b: float) -> np.ndarray:
    r = np.zeros((2, len(METRICS)))
    r[:, 0] = (a, b)
    return r


def test_value_is_continuous_across_ticks_and_truth_matches_counter_differences():
    c = _clock()
    rng = np.random.default_rng(0)
    t = 0
    for _ in range(30):
        t += int(rng.integers(50, 150)) * 1_000_000
        c.advance(t, _rates(*rng.uniform(0, 5e10, size=2)))
    for t1, t2 in [(123_456_789, 2_345_678_901), (NS, 2 * NS), (10, t + NS)]:
        truth = c.mean_rates(t1, t2)[:, 0]
        measured = (c.values_at(t2)[:, 0] - c.values_at(t1)[:, 0]).astype(float) / ((t2 - t1) / NS)
        np.testing.assert_allclose(measured, truth, rtol=1e-6, atol=100)
    # Continuity: just before and at a tick the values agree to within the floor rounding.
    before, at = c.values_at(t - 1)[:, 0], c.values_at(t)[:, 0]
    assert np.all(at >= before) and np.all(at - before < 100)


def test_uint64_counters_wrap_modulo_2_64():
    c = _clock()
    c.advance(NS, _rates(1e9, 0.0), overrides=[((slice(None), 0), np.uint64(2**64 - 500_000_000))])
    v = c.values_at(2 * NS)[0, 0]
    assert int(v) == 500_000_000  # passed 2^64 and restarted near 0


def test_asking_before_the_kept_history_is_a_clear_error():
    c = _clock(capacity=4)
    for k in range(1, 10):
        c.advance(k * NS, _rates(1.0, 1.0))
    with pytest.raises(ValueError, match="before the kept history"):
        c.values_at(NS)
    with pytest.raises(ValueError, match="before the kept history"):
        c.mean_rates(NS, 8 * NS)
    with pytest.raises(ValueError, match="empty interval"):
        c.mean_rates(8 * NS, 8 * NS)


def test_a_segment_holds_only_over_its_span_and_a_late_tick_takes_nothing_back():
    """A tick's rates are for [t_k, u_k]: past u_k the counter stays put (a starved ticker is late),
    the next tick starts from there, and the truth integrates the same held span."""
    c = _clock()
    c.advance(NS, _rates(1e9, 2e9), until_ns=NS + NS // 10)
    held = c.values_at(NS + NS // 10)[:, 0]
    np.testing.assert_array_equal(held, [100_000_000, 200_000_000])
    np.testing.assert_array_equal(c.values_at(3 * NS)[:, 0], held)  # a read while the tick is late
    c.advance(3 * NS, _rates(5e8, 5e8))  # the tick, 1.9 s late
    assert np.all(c.values_at(3 * NS)[:, 0] == held)  # nothing already read is taken back
    truth = c.mean_rates(NS, 4 * NS)[:, 0] * 3
    measured = (c.values_at(4 * NS)[:, 0] - c.values_at(NS)[:, 0]).astype(float)
    np.testing.assert_allclose(measured, truth, rtol=1e-9)
    np.testing.assert_allclose(measured, [1e8 + 5e8, 2e8 + 5e8], rtol=1e-9)
