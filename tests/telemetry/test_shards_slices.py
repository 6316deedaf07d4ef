"""Pure units: shard planning and per-switch slices (rates → frame metrics)."""

from __future__ import annotations

import numpy as np
import pytest

from collectors.snmp import IfSnapshot
from fabricmon.core.telemetry.downsample import downsample
from fabricmon.core.telemetry.frames import Frame
from fabricmon.core.topology.railgen import rail_optimized
from fabricmon.telemetry.shards import UnknownShardError, find_shard, plan_shards
from fabricmon.telemetry.slices import (
    COUNTER_NAMES,
    SLICE_METRICS,
    SwitchRead,
    compute_slice,
    decode_read,
    encode_read,
    read_from_snapshot,
)

GBPS = 1e9


def test_shards_are_deterministic_and_never_span_fabrics() -> None:
    a = rail_optimized("a", servers=4, gpus_per_server=4, spines=2)  # 4 leaves + 2 spines
    b = rail_optimized("b", servers=4, gpus_per_server=2, spines=1)  # 2 leaves + 1 spine
    shards = plan_shards([b, a], 4)
    assert [s.shard_id for s in shards] == ["a:0", "a:1", "b:0"]
    assert shards == plan_shards([a, b], 4)  # input order does not matter
    assert sorted(sum((s.switches for s in shards if s.fabric == "a"), ())) == sorted(sw.name for sw in a.switches)
    assert find_shard([a, b], 4, "b:0").switches == tuple(sorted(sw.name for sw in b.switches))
    with pytest.raises(UnknownShardError, match="a:7"):
        find_shard([a, b], 4, "a:7")
    with pytest.raises(ValueError, match="SHARD_SIZE"):
        plan_shards([a], 0)


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


def test_downsample_means_ignore_nan_and_keep_util_max() -> None:
    def frame(ts: int, util: list[float]) -> Frame:
        u = np.asarray(util, dtype=np.float32)
        return Frame("f", "v1", ts, 1.0, {"util": u, "in_bps": u * 100})

    out = downsample([frame(1, [0.2, np.nan, np.nan]), frame(2, [0.4, 0.5, np.nan])], end_ns=2, step_s=2.0)
    np.testing.assert_allclose(out.metrics["util"][:2], [0.3, 0.5], rtol=1e-6)
    np.testing.assert_allclose(out.metrics["util_max"][:2], [0.4, 0.5], rtol=1e-6)
    assert np.isnan(out.metrics["util"][2]) and np.isnan(out.metrics["util_max"][2])
    assert out.interval_s == 2.0 and out.topology_version == "v1"
    assert Frame.decode(out.encode()).metrics.keys() == out.metrics.keys()
    with pytest.raises(ValueError, match="at least one frame"):
        downsample([], end_ns=0, step_s=1.0)


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
