"""Pure units: an SNMP switch's slice of a frame — a snapshot aligned to the fabric's port order,
rates with their counter widths, gaps, resets and per-cell read times, and the persisted read."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from collectors.snmp import IfSnapshot
from collectors.snmp.slices import (
    COUNTER_NAMES,
    SwitchRead,
    compute_slice,
    decode_read,
    encode_read,
    read_from_snapshot,
)
from fabricmon.core.telemetry.slices import SLICE_METRICS

GBPS = 1e9
G = 1_000_000_000


def _read(ts_s: float, octets: list[int], *, uptime: int = 1000, errors: list[int] | None = None) -> SwitchRead:
    n = len(octets)
    vals = np.asarray(octets, dtype=np.uint64)
    small = np.asarray(errors if errors is not None else [0] * n, dtype=np.uint64)
    counters = {c: (vals if "octets" in c else small) for c in COUNTER_NAMES}
    return SwitchRead(int(ts_s * 1e9), uptime, counters, np.ones(n, bool), None, np.full(n, 100 * GBPS))


def test_slice_rates_and_util() -> None:
    speed = np.full(2, 100 * GBPS)
    prev, cur = _read(10.0, [0, 1_000]), _read(11.0, [1_250_000_000, 1_000], errors=[5, 0])
    part = compute_slice("leaf", prev, cur, speed, 0)
    assert part.ok and part.t_prev_ns == prev.ts_ns and part.t_cur_ns == cur.ts_ns
    np.testing.assert_allclose(part.metrics["in_bps"], [10 * GBPS, 0.0])
    np.testing.assert_allclose(part.metrics["util"], [0.1, 0.0])
    np.testing.assert_allclose(part.metrics["in_errors_ps"], [5.0, 0.0])
    assert set(part.metrics) == set(SLICE_METRICS)
    assert all(v.dtype == np.float32 for v in part.metrics.values())


def test_reset_and_restart_give_nan_never_negative() -> None:
    speed = np.full(2, 100 * GBPS)
    prev = _read(10.0, [5_000_000, 5_000_000])
    reset_one = compute_slice("leaf", prev, _read(11.0, [10, 6_000_000]), speed, 0)
    assert np.isnan(reset_one.metrics["in_bps"][0]) and reset_one.metrics["in_bps"][1] == pytest.approx(8e6)
    assert reset_one.dropped["reset_decrease"] >= 2  # in and out octets of port 0
    restart = compute_slice("leaf", prev, _read(11.0, [6_000_000, 6_000_000], uptime=5), speed, 0)
    assert np.isnan(restart.metrics["util"]).all()
    assert restart.dropped["uptime_drop"] > 0


def test_failed_poll_and_first_poll_are_explicit_gaps() -> None:
    speed = np.full(3, 100 * GBPS)
    failed = compute_slice("leaf", _read(10.0, [1, 2, 3]), None, speed, 123)
    first = compute_slice("leaf", None, _read(10.0, [1, 2, 3]), speed, 0)
    for part in (failed, first):
        assert not part.ok
        assert all(np.isnan(v).all() for v in part.metrics.values())
    assert failed.t_cur_ns == 123 and failed.dropped == {"gap": 3}


def test_persisted_read_round_trips_exactly() -> None:
    big = 2**64 - 5  # raw Counter64 values must survive exactly (never via float64)
    read = _read(10.0, [big, 7])
    back = decode_read(encode_read(read))
    assert back is not None
    assert back.ts_ns == read.ts_ns and back.sys_uptime_ticks == 1000
    assert back.counters["in_octets"].tolist() == [big, 7]
    assert decode_read(b"garbage") is None


def test_snapshot_cell_times_give_each_port_its_own_interval_and_persist() -> None:
    def snap(ts_s: float, octets: list[int], late_row_s: float) -> IfSnapshot:
        n = len(octets)
        cell = np.full(n, int(ts_s * 1e9), dtype=np.int64)
        cell[-1] = int((ts_s + late_row_s) * 1e9)  # the last row came in a later response
        return IfSnapshot("leaf", int(ts_s * 1e9), 1000, np.array([1, 2, 3], np.int32),
                          {c: np.asarray(octets, np.uint64) for c in COUNTER_NAMES},
                          np.full(n, 100_000, np.uint32), np.ones(n, bool), None, 3 * n, 0.2,
                          cell_ts_ns=dict.fromkeys(COUNTER_NAMES, cell))

    order = np.array([3, 1, 2, 9], dtype=np.int32)  # the fabric's port order; port 9 absent
    prev = read_from_snapshot(snap(10.0, [0, 0, 0], 0.2), order)
    cur = read_from_snapshot(snap(11.0, [10**9, 10**9, 10**9], 0.0), order)
    assert prev.ts_ns == 10 * 10**9  # the earliest cell read
    back = decode_read(encode_read(prev))
    assert back is not None and back.cell_ts_ns is not None
    np.testing.assert_array_equal(back.cell_ts_ns["in_octets"], prev.cell_ts_ns["in_octets"])  # type: ignore[index]
    part = compute_slice("leaf", back, cur, np.full(4, 100 * GBPS), 0)
    # port ifIndex 3 was read 0.2 s late in the first poll: 1e9 B over 0.8 s, not 1 s
    np.testing.assert_allclose(part.metrics["in_bps"][:3], [1e10, 8e9, 8e9], rtol=1e-6)
    assert np.isnan(part.metrics["in_bps"][3])
    t_prev, t_cur = part.port_span_ns["in_bps"]
    assert t_prev[:3].tolist() == [10_200_000_000, 10**10, 10**10] and t_cur[:3].tolist() == [11 * 10**9] * 3


def _snap(ts_s: float, ifindex: list[int], octets: list[int], discards: list[int], uptime: int = 1000) -> IfSnapshot:
    """A snapshot serving only ifHCInOctets and ifInDiscards, read in one instant (duration 0)."""
    n = len(ifindex)
    return IfSnapshot(
        switch="leaf",
        ts_ns=int(ts_s * G),
        sys_uptime_ticks=uptime,
        ifindex=np.array(ifindex, dtype=np.int32),
        counters={
            "in_octets": np.array(octets, dtype=np.uint64),
            "in_discards": np.array(discards, dtype=np.uint64),
        },
        high_speed_mbps=np.full(n, 400_000, dtype=np.uint32),
        oper_up=np.ones(n, dtype=bool),
        discontinuity_ticks=np.zeros(n, dtype=np.int64),
        varbinds=3 * n,
        duration_s=0.0,
    )


def _slice(prev: IfSnapshot | None, cur: IfSnapshot | None, order: list[int]):  # type: ignore[no-untyped-def]
    ifindex = np.array(order, dtype=np.int32)
    return compute_slice(
        "leaf",
        None if prev is None else read_from_snapshot(prev, ifindex),
        None if cur is None else read_from_snapshot(cur, ifindex),
        np.full(len(order), 400e9),
        7,
    )


def test_rates_follow_the_fabric_port_order_and_counter_widths() -> None:
    prev = _snap(10, [3, 1, 2], [2**64 - 100, 0, 50], [2**32 - 1, 0, 0])
    cur = _snap(11, [1, 2, 3], [1000, 40, 2**64 - 1], [5, 1, 9])  # port 2 went backwards: reset
    part = _slice(prev, cur, [1, 3, 2, 7])
    in_bps, discards = part.metrics["in_bps"], part.metrics["in_discards_ps"]
    assert in_bps[:2].tolist() == [8000.0, 792.0]  # 1000 B and a Counter64 delta of 99 B in 1 s
    assert np.isnan(in_bps[2]) and np.isnan(in_bps[3])  # reset; port 7 not served: a gap
    assert discards[:3].tolist() == [5.0, 10.0, 1.0]  # port 3 wrapped its Counter32 once
    assert part.dropped == {"reset_decrease": 1, "gap": 2}
    assert np.isnan(part.metrics["out_bps"]).all()  # a column the agent does not serve: no data


def test_a_failed_poll_is_a_gap_everywhere_and_an_uptime_drop_drops_all() -> None:
    ok = _snap(10, [1, 2], [0, 0], [0, 0])
    failed = _slice(ok, None, [1, 2])
    assert not failed.ok and failed.dropped == {"gap": 2} and failed.t_cur_ns == 7
    restarted = _snap(11, [1, 2], [10, 10], [0, 0], uptime=5)
    part = _slice(ok, restarted, [1, 2])
    assert np.isnan(part.metrics["in_bps"]).all() and np.isnan(part.metrics["in_discards_ps"]).all()
    assert part.dropped == {"uptime_drop": 4}  # both ports of both served columns
    assert _slice(None, None, [1]).dropped == {"gap": 1}


def test_each_port_rate_runs_between_its_own_cell_read_times() -> None:
    prev = _snap(10, [1, 2, 3], [0, 0, 0], [0, 0, 0])
    cur = _snap(11, [1, 2, 3], [1000, 1000, 1000], [0, 0, 0])
    # row 3 of the first poll came in a later response (0.5 s late); its discards column is unstamped
    late = np.array([10, 10, 10.5]) * G
    prev = replace(prev, cell_ts_ns={"in_octets": late.astype(np.int64)})
    part = _slice(prev, cur, [3, 1, 2, 9])
    assert part.metrics["in_bps"][:3].tolist() == [16000.0, 8000.0, 8000.0]
    assert np.isnan(part.metrics["in_bps"][3])
    t_prev, t_cur = part.port_span_ns["in_discards_ps"]  # no per-cell stamps: the poll's one read time
    assert set(t_prev.tolist()) == {10 * G} and set(t_cur.tolist()) == {11 * G}
