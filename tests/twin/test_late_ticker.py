"""The twin's ticker, late: at 16,896 ports on a busy box it stalls past a second. The ticks it
missed are laid when it comes back, each with the schedule's traffic over its own span, so a
step's all-to-all that fell in the stall is counted, not replaced by the rates of the tick before
(what the scale runs showed: a hot GPU's whole step missing from the frames)."""

from __future__ import annotations

import numpy as np
import pytest

from twin.cluster import Twin
from twin.config import TwinConfig

NS = 1_000_000_000
PERIOD = NS // 10


@pytest.fixture
def stopped_twin(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(Twin, "_ticker", lambda self: None)  # the test is the ticker
    tw = Twin(TwinConfig(name="late", servers=8, gpus_per_server=8, spines=2, snmp_port_base=0)).start()
    yield tw
    tw.stop()


def test_a_stalled_second_is_counted_whole_when_the_ticker_comes_back(stopped_twin) -> None:  # type: ignore[no-untyped-def]
    tw = stopped_twin
    t0 = tw.t0_ns
    tw._tick(t0 + PERIOD)  # on time
    read_in_stall = tw.clock.values_at(t0 + NS)[:, 0]  # a poll while the ticker is stalled
    tw._tick(t0 + 2 * NS + PERIOD // 3)  # 1.9 s late
    after = tw.clock.values_at(t0 + 2 * NS)[:, 0]
    counted = (after - tw.clock.values_at(t0)[:, 0]).astype(float)
    in_b, _, _ = tw.timeline.window_bytes(t0, t0 + 2 * NS)
    assert in_b.sum() > 0  # the job's steps ran in the stall
    # every byte, to the floor of each of the 20 ticks' segments
    np.testing.assert_allclose(counted, in_b, rtol=1e-6, atol=21)
    assert np.all(after >= read_in_stall)  # what the poll read is not taken back
    assert tw.late_ticks == 18  # ticks 2 … 19 laid late; 20 is now's


def test_past_the_job_lag_bound_the_counters_hold_as_the_job_stalls(stopped_twin) -> None:  # type: ignore[no-untyped-def]
    """A ticker 5 s late lays the last 2 s (MAX_JOB_LAG_NS) only: before them the counters hold, as
    the timeline's job stalls when the twin falls that far behind — bounded work, counted late."""
    tw = stopped_twin
    t0 = tw.t0_ns
    tw._tick(t0 + PERIOD)
    held = tw.clock.values_at(t0 + 2 * PERIOD)[:, 0]
    tw._tick(t0 + 5 * NS)
    np.testing.assert_array_equal(tw.clock.values_at(t0 + 3 * NS)[:, 0], held)
    in_b, _, _ = tw.timeline.window_bytes(t0 + 3 * NS, t0 + 5 * NS)
    counted = (tw.clock.values_at(t0 + 5 * NS)[:, 0] - held).astype(float)
    np.testing.assert_allclose(counted, in_b, rtol=1e-6, atol=21)
    assert tw.late_ticks == 19


def test_a_fault_between_grid_ticks_lands_at_its_instant(stopped_twin) -> None:  # type: ignore[no-untyped-def]
    tw = stopped_twin
    t0, sl = tw.t0_ns, tw.ports.slice_of(tw.fabric.switches[0].name)
    at = t0 + 5 * PERIOD + PERIOD // 2
    tw._tick(at, overrides=[((sl, slice(None)), 0)])  # a restart, the ticker late too
    assert np.all(tw.clock.values_at(at)[sl] == 0)
    assert np.all(tw.clock.values_at(at - 1)[sl, 0] > 0)  # the counters ran before it
    tw._tick(t0 + 8 * PERIOD)
    in_b, _, _ = tw.timeline.window_bytes(at, t0 + 8 * PERIOD)
    np.testing.assert_allclose(tw.clock.values_at(t0 + 8 * PERIOD)[sl, 0].astype(float), in_b[sl], atol=4)


def test_what_an_agent_reads_while_the_ticker_is_late_is_final(stopped_twin) -> None:  # type: ignore[no-untyped-def]
    """An agent's read lays the grid ticks up to its instant itself: it answers the exact counter,
    never a held value that the ticker's catch-up would revise upwards afterwards (a poll would
    then see the counter jump and a later truth disagree with what it was told)."""
    tw = stopped_twin
    t0 = tw.t0_ns
    tw._tick(t0 + PERIOD)
    at = t0 + NS + 37_000_000  # the ticker 0.9 s late
    read = tw.counters_at(None, at)["ifHCInOctets"]
    tw._tick(t0 + 2 * NS)  # the ticker comes back
    np.testing.assert_array_equal(tw.counters_at(None, at)["ifHCInOctets"], read)
    # and it counted every byte up to the grid tick before it (within a tick, a segment's mean)
    in_b, _, _ = tw.timeline.window_bytes(t0, t0 + NS)
    counted = tw.counters_at(None, t0 + NS)["ifHCInOctets"] - tw.counters_at(None, t0)["ifHCInOctets"]
    np.testing.assert_allclose(counted.astype(float), in_b, rtol=1e-6, atol=11)
