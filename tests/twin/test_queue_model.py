"""The closed-form fluid queue (fabricmon/core/queues.py): invariants by Hypothesis, and the
closed form against a brute-force Euler integration of the same fluid equations."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twin.queue_model import QueueBank, QueueConfig, advance, ecn_probability, spread_to_upstream

# Small units so an Euler reference can resolve the PFC sawtooth: C = 1000 B/s per queue.
C = 1000.0


def small_cfg(n: int, lossless: bool, pmax: float = 0.3) -> QueueConfig:
    return QueueConfig.for_ports(
        np.full(n, C * 8),
        lossless=lossless,
        buffer_bytes=400.0,
        kmin_bytes=50.0,
        kmax_bytes=150.0,
        pmax=pmax,
        xoff_bytes=200.0,
        xon_offset_bytes=40.0,
        pkt_bytes=10.0,
        pause_refresh_s=0.5,
    )


def euler(cfg: QueueConfig, i: int, q: float, paused: bool, lam: float, t: float, dt: float = 2e-5):
    """Scalar reference: tiny steps of the §5.1 equations for queue i."""
    c, b = cfg.line_rate_bytes_ps[i], cfg.buffer_bytes[i]
    admitted = dropped = marked = pause = 0.0
    xoffs = 0
    peak = q
    steps = round(t / dt)
    for _ in range(steps):
        if cfg.lossless[i]:
            if not paused and q >= cfg.xoff_bytes[i]:
                paused, xoffs = True, xoffs + 1
            elif paused and q <= cfg.xon_bytes[i]:
                paused = False
        a = 0.0 if paused else lam
        out = c if q > 0 else min(c, a)
        p = float(ecn_probability(np.array([q]), cfg.kmin_bytes[i : i + 1], cfg.kmax_bytes[i : i + 1], cfg.pmax)[0])
        marked += p * out * dt if q > 0 else 0.0
        nq = q + (a - c) * dt
        if nq > b:
            dropped += nq - b
            nq = b
        q = max(nq, 0.0)
        admitted += a * dt
        pause += dt if paused else 0.0
        peak = max(peak, q)
    return admitted, dropped, marked, pause, xoffs, peak, q


rates = st.floats(0.0, 5.0 * C)
occupancy = st.floats(0.0, 400.0)
durations = st.floats(0.0, 3.0)


@settings(max_examples=200, deadline=None)
@given(
    q0=st.lists(occupancy, min_size=1, max_size=8),
    lam=st.lists(rates, min_size=8, max_size=8),
    t=durations,
    lossless=st.booleans(),
    paused=st.booleans(),
)
def test_invariants(q0: list[float], lam: list[float], t: float, lossless: bool, paused: bool) -> None:
    n = len(q0)
    cfg = small_cfg(n, lossless)
    q = np.array(q0)
    if lossless:  # a paused queue sits between Xon and Xoff; clip like the model's own states
        q = np.where(paused, np.clip(q, cfg.xon_bytes, cfg.xoff_bytes), np.minimum(q, cfg.xoff_bytes))
    p0 = np.full(n, paused and lossless)
    r = advance(cfg, q, p0, np.array(lam[:n]), t)
    # conservation: admitted = transmitted + Δqueued + dropped, and nothing negative
    np.testing.assert_allclose(r.admitted_bytes, r.tx_bytes + (r.q_bytes - q) + r.dropped_bytes, atol=1e-6)
    for arr in (r.admitted_bytes, r.tx_bytes, r.dropped_bytes, r.ecn_marked_bytes, r.pause_s, r.pause_frames):
        assert np.all(arr >= -1e-9)
    # the line never sends more than C·T, marks never exceed what was sent
    assert np.all(r.tx_bytes <= C * t + 1e-6)
    assert np.all(r.ecn_marked_bytes <= r.tx_bytes + 1e-6)
    assert np.all(r.peak_bytes >= r.q_bytes - 1e-9)
    assert np.all(r.peak_bytes >= q - 1e-9)
    assert np.all((r.q_bytes >= 0) & (r.q_bytes <= cfg.buffer_bytes + 1e-9))
    assert np.all(r.pause_s <= t + 1e-9)
    # no ECN while the queue never passed Kmin
    assert np.all(r.ecn_marked_bytes[r.peak_bytes <= cfg.kmin_bytes] == 0.0)
    if lossless:
        assert np.all(r.dropped_bytes == 0.0)
    else:
        assert np.all(r.pause_s == 0.0)
        assert np.all(r.pause_frames == 0.0)


@pytest.mark.parametrize(
    ("lossless", "paused", "q0", "lam", "t"),
    [
        (False, False, 0.0, 1500.0, 1.0),  # fills past Kmin/Kmax, overflows, drops
        (False, False, 350.0, 200.0, 1.0),  # drains through the RED ramp to empty
        (False, False, 100.0, 1000.0, 0.7),  # balanced: flat at a marking level
        (True, False, 0.0, 3000.0, 1.3),  # reaches Xoff, PFC sawtooth for many cycles
        (True, True, 190.0, 2500.0, 0.9),  # starts paused mid-cycle
        (True, True, 195.0, 400.0, 1.0),  # paused, then drains below line rate
        (True, False, 10.0, 1200.0, 0.5),  # slow rise that never reaches Xoff
    ],
)
def test_closed_form_matches_euler(lossless: bool, paused: bool, q0: float, lam: float, t: float) -> None:
    cfg = small_cfg(1, lossless)
    r = advance(cfg, np.array([q0]), np.array([paused]), np.array([lam]), t)
    admitted, dropped, marked, pause, xoffs, peak, q_end = euler(cfg, 0, q0, paused, lam, t)
    tol = 2e-5 * 5 * C * 3  # a few Euler steps' worth of bytes
    assert r.admitted_bytes[0] == pytest.approx(admitted, rel=0.005, abs=tol)
    assert r.dropped_bytes[0] == pytest.approx(dropped, abs=tol)
    assert r.ecn_marked_bytes[0] == pytest.approx(marked, rel=0.01, abs=tol)
    assert r.pause_s[0] == pytest.approx(pause, abs=0.01 * t + 1e-3)
    assert r.pause_frames[0] - r.pause_s[0] / cfg.pause_refresh_s == pytest.approx(xoffs, abs=1.0)
    assert r.peak_bytes[0] == pytest.approx(peak, abs=tol)
    assert r.q_bytes[0] == pytest.approx(q_end, abs=4.0)  # sawtooth phase drifts a little in Euler


def test_pfc_admits_line_rate_and_pauses_the_excess_fraction() -> None:
    cfg = small_cfg(1, lossless=True)
    bank = QueueBank(cfg)
    for _ in range(50):
        bank.step(np.array([4 * C]), 1.0)
    # long-run: admitted ≈ C·T, paused fraction ≈ 1 − C/λ = 3/4
    assert bank.admitted_bytes[0] / 50 == pytest.approx(C, rel=0.01)
    assert bank.pause_s[0] / 50 == pytest.approx(0.75, rel=0.01)
    assert bank.dropped_bytes[0] == 0.0


def test_watermark_is_read_and_clear_and_bank_accumulates_steps() -> None:
    cfg = small_cfg(2, lossless=False)
    bank = QueueBank(cfg)
    bank.step(np.array([3 * C, 0.5 * C]), 0.1)  # queue 0 climbs to 200 B
    bank.step(np.array([0.0, 0.5 * C]), 0.15)  # and drains to 50 B
    assert bank.watermark_bytes[0] == pytest.approx(200.0)
    assert bank.q_bytes[0] == pytest.approx(50.0)
    wm = bank.read_watermark()
    assert wm[0] == pytest.approx(200.0) and wm[1] == 0.0
    assert bank.watermark_bytes[0] == pytest.approx(50.0)  # next period starts at the occupancy
    assert np.all(bank.watermark_bytes >= bank.q_bytes)
    one = advance(cfg, np.zeros(2), np.zeros(2, bool), np.array([3 * C, 0.5 * C]), 0.1)
    assert bank.tx_bytes[1] == pytest.approx(one.tx_bytes[1] * 2.5)
    assert list(bank.packets(np.array([99.0, 100.0]))) == [9, 10]


def test_splitting_a_phase_gives_the_same_result() -> None:
    cfg = small_cfg(3, lossless=True)
    lam = np.array([2.5 * C, 0.7 * C, 6 * C])
    whole = advance(cfg, np.zeros(3), np.zeros(3, bool), lam, 1.0)
    a = advance(cfg, np.zeros(3), np.zeros(3, bool), lam, 0.37)
    b = advance(cfg, a.q_bytes, a.paused, lam, 0.63)
    for f in ("admitted_bytes", "tx_bytes", "ecn_marked_bytes", "pause_s"):
        np.testing.assert_allclose(getattr(a, f) + getattr(b, f), getattr(whole, f), rtol=1e-9, atol=1e-6)
    np.testing.assert_allclose(b.q_bytes, whole.q_bytes, atol=1e-6)


def test_bad_config_and_shapes_are_named() -> None:
    with pytest.raises(ValueError, match="kmin_bytes < kmax_bytes"):
        QueueConfig.for_ports([8000.0], kmin_bytes=10.0, kmax_bytes=5.0)
    with pytest.raises(ValueError, match="line_rate_bytes_ps"):
        QueueConfig.for_ports([0.0])
    with pytest.raises(ValueError, match="arrival_bytes_ps has shape"):
        advance(small_cfg(2, True), np.zeros(2), np.zeros(2, bool), np.zeros(3), 1.0)


def test_pause_spreads_to_feeding_ports_by_max() -> None:
    out = spread_to_upstream(np.array([0, 1, 1, 3]), np.array([0, 0, 1, 1]), np.array([0.2, 0.5]), 4)
    np.testing.assert_allclose(out, [0.2, 0.5, 0.0, 0.5])
