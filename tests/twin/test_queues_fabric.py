"""The twin's fabric queues on the job timeline (pure, no servers): conservation against the bytes
the interface counters count, drops in lossy mode equal to the timeline's, monotone counters, and
a watermark that composes over split intervals.

    JobTimeline (per-phase port bytes) ──▶ FabricQueues (burst + drain per phase, λ = 0 between)
"""

from __future__ import annotations

import numpy as np
import pytest

from fabricmon.core.topology.port_index import build_port_index
from tests.topologies import four_leaf_two_spine
from twin.fabric_queues import CUM, FabricQueues, peer_positions
from twin.moe import MoeConfig, MoeTraffic
from twin.routing import Router, RoutingMode, Wiring
from twin.schedule import JobTimeline

T0 = 1_000_000_000_000


def build(lossy: bool, routing: RoutingMode = "pxn") -> tuple[JobTimeline, FabricQueues]:
    fab = four_leaf_two_spine("q", servers=4)
    ports = build_port_index(fab)
    wiring = Wiring(fab, ports)
    router = Router(wiring, routing, seed=2)
    # a small buffer in lossy mode, so the hot port drops
    tl = JobTimeline(MoeTraffic(MoeConfig(layers=4), wiring.n_gpus, seed=2), router, ports.speed_bps,
                     ports.host_facing, T0, lossy=lossy, buffer_bytes=4e6)
    q = FabricQueues(tl, ports, peer_positions(wiring.link, len(ports)), T0, lossy=lossy, buffer_bytes=4e6)
    return tl, q


@pytest.mark.parametrize("lossy", [False, True])
def test_bytes_conserved_at_phase_ends_and_drops_match_the_timeline(lossy: bool) -> None:
    tl, q = build(lossy)
    q.advance_to(T0 + 600_000_000)
    phases = tl.phases_from(T0, T0 + 600_000_000)
    assert len(phases) >= 8
    end = phases[5].end_ns
    c = q.counters_at(end)
    done = [ph for ph in phases if ph.end_ns <= end]
    out = np.sum([ph.out_bytes for ph in done], axis=0)
    dropped = np.sum([ph.out_dropped for ph in done], axis=0)
    # bursts sit on the ns grid: a lossy drop may differ from the timeline's by line rate x 1 ns
    grid = 2 * 400e9 / 8 * 1e-9
    np.testing.assert_allclose(c["tx_bytes"] + c["q_bytes"], out, rtol=1e-9, atol=grid)
    np.testing.assert_allclose(c["dropped_bytes"], dropped, rtol=1e-9, atol=grid)
    assert np.all(c["ecn_marked_bytes"] <= c["tx_bytes"] + 1e-6)
    assert c["ecn_marked_bytes"].max() > 0  # the skewed job builds real queues
    if lossy:
        assert dropped.max() > 0 and c["pfc_tx_frames"].max() == 0
    else:
        assert dropped.max() == 0 and c["pfc_tx_frames"].max() > 0 and c["queue_pause_s"].max() > 0


def test_counters_are_monotone_and_the_watermark_composes() -> None:
    _, q = build(False)
    times = np.linspace(T0, T0 + 400_000_000, 41).astype(np.int64)
    rows = [q.counters_at(int(t)) for t in times]
    for key in CUM:
        stacked = np.stack([r[key] for r in rows])
        assert np.all(np.diff(stacked, axis=0) >= -1e-6), key
    a, b, c = int(times[3]), int(times[17]), int(times[33])
    whole = q.peak_bytes(a, c)
    np.testing.assert_allclose(whole, np.maximum(q.peak_bytes(a, b), q.peak_bytes(b, c)), atol=1e-6)
    occupancy = np.stack([r["q_bytes"] for r in rows[3:34]])
    assert np.all(whole >= occupancy.max(axis=0) - 1e-6)
    assert whole.max() == pytest.approx(q.cfg.xoff_bytes[0])  # the hot queue reached Xoff (PFC)
    with pytest.raises(ValueError, match="empty interval"):
        q.peak_bytes(c, a)


@pytest.mark.parametrize("lossy", [False, True])
def test_a_switch_read_is_the_fabric_read_of_its_ports_bit_for_bit(lossy: bool) -> None:
    """A gNMI target reads its own switch's slice: the closed forms run for those ports plus the
    queues that can pause (PFC reaches the slice through its peers: ECMP puts the spines on the
    path), replayed from the phase's checkpoint — exactly what the whole fabric's read gives for
    those ports."""
    _, q = build(lossy, "ecmp")
    ports = q.ports
    times = np.linspace(T0 + 1_000_000, T0 + 500_000_000, 23).astype(np.int64)
    q.advance_to(int(times[-1]))
    paused_seen = False
    for t in times.tolist():
        whole = q.counters_at(t)
        peak = q.peak_bytes(t - 80_000_000, t) if t - 80_000_000 >= q.oldest_ns else None
        for name in ports.switch_names:
            sl = ports.slice_of(name)
            mine = q.counters_at(t, sl)
            for key, values in mine.items():
                np.testing.assert_array_equal(values, whole[key][sl], err_msg=f"{name} {key} at {t}")
            if peak is not None:
                np.testing.assert_array_equal(q.peak_bytes(t - 80_000_000, t, sl), peak[sl])
        paused_seen |= bool(whole["pfc_rx_frames"].any())
    assert paused_seen or lossy  # PFC crossed cables into other switches' reads


def test_history_is_bounded_in_bytes_and_keeps_whole_phases() -> None:
    tl, full = build(False)
    q = FabricQueues(tl, full.ports, full.peer_pos, T0, keep_s=6.0, min_keep_s=0.2, max_bytes=64 << 10)
    for k in range(1, 31):
        q.advance_to(T0 + k * 100_000_000)
        assert q.history_bytes <= (64 << 10) + 8 * max(s.nbytes for s in q.segments)
        assert q.segments[0].cum0 is not None  # the oldest kept segment is a phase's checkpoint
    assert q.oldest_ns >= T0 + 2_000_000_000  # min_keep_s, not keep_s, once over the budget
    with pytest.raises(ValueError, match="before the kept queue history"):
        q.counters_at(T0)
    # a live read that took the oldest instant just before another thread's advance pruned past
    # it answers for the oldest kept instant (or_oldest), where a plain read is refused
    checked = q.oldest_ns
    q.advance_to(T0 + 40 * 100_000_000)
    assert q.oldest_ns > checked
    with pytest.raises(ValueError, match="before the kept queue history"):
        q.counters_at(checked)
    got, want = q.counters_at(checked, or_oldest=True), q.counters_at(q.oldest_ns)
    assert got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in want)
    end = T0 + 40 * 100_000_000 - 1
    assert np.array_equal(q.peak_bytes(checked, end, or_oldest=True), q.peak_bytes(q.oldest_ns, end))
