"""Pure units of issue 14: columns per cell (a hole is NaN in one metric of one port), HC counters
else 32-bit ones with the wrap-ambiguity check, speed from ifHighSpeed/ifSpeed/topology, counters
an agent repeated from its cache, ports re-mapped by ifName, and the persisted read keeping it all.

    snapshot (ifIndex 1 2 3)        ports in fabric order        SwitchRead        slice
    in_octets  HC HC 32             valid  ✓ ✓ ✓                 bits 64 64 32     in_bps, util …
    in_discards ✓  ·  ✓   ──align──▶ valid  ✓ · ✓   ──rates──▶   no_cell on port 2 in_discards_ps only
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from collectors.snmp.poller import SnmpPoller
from collectors.snmp.slices import (
    COUNTER_NAMES,
    SwitchRead,
    compute_slice,
    decode_read,
    encode_read,
    hold_unchanged,
    ifindex_by_name,
    read_from_snapshot,
)
from fabricmon.core.telemetry.rates import CounterRead, RateReason, counter_rates

G = 1e9


def _walk(poller: SnmpPoller, cells: dict[str, dict[int, int]], ts_ns: int = 10**18):
    """What one walk gave, as the poller's assembly sees it: per planned column, its cells."""
    columns = poller._plan("sw")
    index = [np.asarray(list(cells.get(c.key, {})), dtype=np.int64) for c in columns]
    values = [np.asarray(list(cells.get(c.key, {}).values()), dtype=np.uint64) for c in columns]
    read_ns = [np.full(len(ix), ts_ns, dtype=np.int64) for ix in index]
    return poller._assemble("sw", index, values, varbinds=1, uptime=100, ts_ns=ts_ns, duration_s=0.0,
                            read_ns=read_ns, columns=columns)


def test_cells_not_rows_hc_else_32_bit_and_speed_fallbacks() -> None:
    poller = SnmpPoller()
    snap = _walk(poller, {
        "in_octets": {1: 10, 2: 20},  # port 3 serves no HC counter (a VLAN interface)
        "in_octets32": {1: 1, 2: 2, 3: 33},
        "out_octets": {1: 11, 2: 21, 3: 31},
        "in_discards": {1: 5, 3: 7},  # port 2 (a LAG) has no ifInDiscards
        "high_speed_mbps": {1: 100_000, 2: 0},  # port 2: 0, port 3: not served
        "speed_bps32": {1: 2**32 - 1, 2: 1_000_000_000, 3: 2**32 - 1},
        "oper_status": {1: 1, 2: 1, 3: 2},
    })  # fmt: skip
    assert snap.ifindex.tolist() == [1, 2, 3]  # every port kept
    assert snap.counters["in_octets"].tolist() == [10, 20, 33]
    assert snap.counter_bits is not None and snap.counter_bits["in_octets"].tolist() == [64, 64, 32]
    assert snap.valid is not None and snap.valid["in_discards"].tolist() == [True, False, True]
    assert snap.speed_bps is not None
    assert snap.speed_bps[:2].tolist() == [100e9, 1e9] and np.isnan(snap.speed_bps[2])  # → topology
    assert snap.oper_up.tolist() == [True, True, False]
    assert "in_pkts" not in snap.counters  # served for no port: absent, as before
    # Next walk: the octet fallbacks stay (port 3 lacks HC), ifSpeed stays (port 2 says 0 Mb/s),
    # the packet fallbacks (nothing lacked ifHCInUcastPkts… it was not served at all) stay too.
    assert {c.key for c in poller._plan("sw")} >= {"in_octets32", "speed_bps32"}
    full = {k: {1: 1, 2: 2} for k in ("in_octets", "out_octets", "in_pkts", "out_pkts")}
    _walk(poller, {**full, "high_speed_mbps": {1: 400_000, 2: 400_000}})
    assert not {c.key for c in poller._plan("sw")} & {"in_octets32", "out_octets32", "speed_bps32"}


def _read(ts_s: float, octets: list[int], **kw) -> SwitchRead:  # type: ignore[no-untyped-def]
    n = len(octets)
    vals = np.asarray(octets, dtype=np.uint64)
    counters = {c: (vals if "octets" in c else np.zeros(n, np.uint64)) for c in COUNTER_NAMES}
    return SwitchRead(int(ts_s * 1e9), kw.pop("uptime", 1000), counters, np.ones(n, bool), None,
                      kw.pop("speed", np.full(n, np.nan)), **kw)


def test_a_missing_cell_is_nan_in_that_metric_of_that_port_only() -> None:
    spec = np.full(2, 10 * G)
    hole = {c: np.array([True, c != "in_discards"]) for c in COUNTER_NAMES}
    part = compute_slice("sw", _read(10, [0, 0]), _read(11, [1_000_000, 2_000_000], valid=hole), spec, 0)
    assert part.metrics["in_bps"].tolist() == [8e6, 16e6]  # the port stays
    assert part.metrics["in_discards_ps"][0] == 0 and np.isnan(part.metrics["in_discards_ps"][1])
    assert part.reasons["in_discards_ps"].tolist() == [RateReason.OK, RateReason.NO_CELL]
    assert part.dropped == {"no_cell": 1}
    np.testing.assert_allclose(part.metrics["util"], [8e6 / 10e9, 16e6 / 10e9])  # topology speed


def test_32_bit_counters_wrap_once_and_are_withheld_where_they_could_wrap_twice() -> None:
    narrow = {c: np.array([32, 32], np.uint8) for c in ("in_octets", "out_octets")}
    speed = np.array([10 * G, 100 * G])  # 2**32 B at line rate: 3.4 s at 10 G, 0.34 s at 100 G
    prev = _read(10, [2**32 - 1000, 2**32 - 1000], bits=narrow, speed=speed)
    cur = _read(11, [24_000, 24_000], bits=narrow, speed=speed)
    part = compute_slice("sw", prev, cur, speed, 0)
    assert part.metrics["in_bps"][0] == 25_000 * 8  # one wrap undone
    assert np.isnan(part.metrics["in_bps"][1])
    assert part.reasons["in_bps"][1] == RateReason.WRAP_AMBIGUOUS
    assert part.reasons["in_discards_ps"].tolist() == [0, 0]  # Counter32 by nature: not withheld
    # HC in one read, 32-bit in the other: not comparable.
    part = compute_slice("sw", replace(prev, bits=None), cur, speed, 0)
    assert part.reasons["in_bps"].tolist() == [RateReason.WIDTH_CHANGED] * 2


def test_counter_rates_takes_per_port_widths() -> None:
    prev = CounterRead(0, np.array([2**32 - 10, 100], np.uint64))
    cur = CounterRead(10**9, np.array([5, 50], np.uint64))
    r = counter_rates(prev, cur, [np.nan, np.nan], width_bits=np.array([32, 64], np.uint8))
    assert r.delta[0] == 15 and r.reason[1] == RateReason.RESET_DECREASE


def test_a_cached_counter_is_held_and_the_next_rate_runs_between_real_updates() -> None:
    """Agent refreshes every 3 s, polled every 1 s: values change at t=10, 13, 16 only."""
    spec = np.full(2, 10 * G)
    values = {10: [0, 0], 11: [0, 0], 12: [0, 0], 13: [300, 0], 14: [300, 0], 15: [300, 0], 16: [600, 0]}
    prev = None
    seen = []
    for t, octets in values.items():
        cur = hold_unchanged(prev, _read(t, octets, uptime=t * 100))
        if prev is not None:
            part = compute_slice("sw", prev, cur, spec, 0)
            seen.append((t, RateReason(int(part.reasons["in_bps"][0])).name, float(part.metrics["in_bps"][0])))
        prev = cur
    # First sight: not known to move (0, 0, then the cycle in one interval); then held properly.
    assert [s[1] for s in seen] == ["OK", "OK", "OK", "STALE", "STALE", "OK"]
    assert seen[-1][2] == 100 * 8  # 300 B over 13 → 16: the real update interval
    assert np.isnan(seen[3][2]) and np.isnan(seen[4][2])
    # The idle port (1) is never stale: 0 all along.
    # A port that stops while others move is idle at once; a switch idle from the start is never stale.
    idle = hold_unchanged(_read(1, [5, 5]), _read(2, [5, 5]))
    assert idle.stale is not None and not idle.stale.any()


def test_ports_follow_their_names_across_a_renumbering() -> None:
    configured = np.array([1, 2, 3, 4], np.int32)
    names = ["Ethernet1", "Ethernet2", "Ethernet3", "mgmt0"]
    now, moved = ifindex_by_name(configured, names, {1: "Ethernet3", 2: "Ethernet1", 3: "Ethernet2"})
    assert now.tolist() == [2, 3, 1, 4] and moved == {"Ethernet1": (1, 2), "Ethernet2": (2, 3), "Ethernet3": (3, 1)}
    # A port whose name is gone, at an ifIndex another port's name now holds: nowhere (a gap).
    now, _ = ifindex_by_name(configured, names, {4: "Ethernet1"})
    assert now.tolist() == [4, 2, 3, 0]
    assert ifindex_by_name(configured, names, {})[0].tolist() == [1, 2, 3, 4]  # no ifName: as configured


def test_per_cell_fields_survive_the_persisted_read() -> None:
    snap_valid = {c: np.array([True, c != "in_discards"]) for c in COUNTER_NAMES}
    read = _read(10, [1, 2], valid=snap_valid, bits={"in_octets": np.array([64, 32], np.uint8)},
                 moving=np.array([True, False]))
    back = decode_read(encode_read(read))
    assert back is not None and back.moving is not None and back.valid is not None and back.bits is not None
    assert back.moving.tolist() == [True, False]
    assert back.valid["in_discards"].tolist() == [True, False]
    assert back.bits["in_octets"].tolist() == [64, 32]


def test_snapshot_alignment_carries_validity_and_speed() -> None:
    poller = SnmpPoller()
    snap = _walk(poller, {"in_octets": {1: 10, 7: 70}, "out_octets": {1: 1}, "high_speed_mbps": {7: 25_000}})
    read = read_from_snapshot(snap, np.array([7, 1, 9], np.int32))
    assert read.present.tolist() == [True, True, False]
    assert read.valid is not None and read.valid["out_octets"].tolist() == [False, True, False]
    assert read.speed_bps[0] == 25e9 and np.isnan(read.speed_bps[1:]).all()
