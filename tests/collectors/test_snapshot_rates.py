"""Pure unit tests of snapshot → rates: alignment to the fabric's port order, widths, gaps."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from collectors.snmp import IfSnapshot
from collectors.snmp.snapshot_rates import snapshot_rates
from fabricmon.core.telemetry.rates import RateReason

G = 1_000_000_000


def snap(
    ts_s: float, ifindex: list[int], octets: list[int], discards: list[int], uptime: int = 1000
) -> IfSnapshot:
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
        duration_s=0.01,
    )


def test_rates_follow_the_fabric_port_order_and_counter_widths() -> None:
    prev = snap(10, [3, 1, 2], [2**64 - 100, 0, 50], [2**32 - 1, 0, 0])
    cur = snap(11, [1, 2, 3], [1000, 40, 2**64 - 1], [5, 1, 9])  # port 2 went backwards: reset
    rates = snapshot_rates(prev, cur, ifindex=[1, 3, 2, 7], speed_bps=np.full(4, 400e9))
    octets, discards = rates["in_octets"], rates["in_discards"]
    assert octets.rate_per_s[:2].tolist() == [1000.0, 99.0]
    assert octets.reason.tolist() == [RateReason.OK, RateReason.OK, RateReason.RESET_DECREASE, RateReason.GAP]
    assert discards.delta[:3].tolist() == [5.0, 10.0, 1.0]  # port 3 wrapped its Counter32 once


def test_a_failed_poll_is_a_gap_everywhere_and_uptime_drop_drops_all() -> None:
    ok = snap(10, [1, 2], [0, 0], [0, 0])
    rates = snapshot_rates(ok, None, [1, 2], np.full(2, 1e9))
    assert all((r.reason == RateReason.GAP).all() for r in rates.values())
    restarted = snap(11, [1, 2], [10, 10], [0, 0], uptime=5)
    rates = snapshot_rates(ok, restarted, [1, 2], np.full(2, 1e9))
    assert all((r.reason == RateReason.UPTIME_DROP).all() for r in rates.values())
    assert snapshot_rates(None, None, [1], [1e9]) == {}


def test_each_port_rate_runs_between_its_own_cell_read_times() -> None:
    prev = snap(10, [1, 2, 3], [0, 0, 0], [0, 0, 0])
    cur = snap(11, [1, 2, 3], [1000, 1000, 1000], [0, 0, 0])
    # row 3 of the first poll came in a later response (0.5 s late); its discards column is unstamped
    late = np.array([10, 10, 10.5]) * G
    prev = replace(prev, cell_ts_ns={"in_octets": late.astype(np.int64)})
    rates = snapshot_rates(prev, cur, ifindex=[3, 1, 2, 9], speed_bps=np.full(4, 400e9))
    assert rates["in_octets"].rate_per_s[:3].tolist() == [2000.0, 1000.0, 1000.0]
    assert rates["in_octets"].reason[3] == RateReason.GAP
    assert rates["in_discards"].interval_s == 1.0  # no per-cell stamps: the poll's one ts_ns
