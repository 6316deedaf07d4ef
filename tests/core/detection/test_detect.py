"""Detection: unit cases on a small fabric, then seeded scenarios with ground truth.

Small fabric (railgen, 4 servers × 2 GPUs, 2 spines)::

    [spine0]   [spine1]
       ╲╱  ╲╱  (4 uplinks per leaf)
    [leaf-r0]  [leaf-r1]
     │ 4 host ports each: node001..node004
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fabricmon.core.detection.conditions import Condition, conditions, trajectory_step
from fabricmon.core.detection.config import DetectConfig
from fabricmon.core.detection.geometry import fabric_geometry
from fabricmon.core.detection.lifecycle import LifecycleConfig, advance, fingerprint
from fabricmon.core.detection.window import PRESSURE_METRICS, MovingState, detect_window
from fabricmon.core.topology.port_index import build_port_index
from tests.topologies import two_leaf_two_spine
from twin.scenario_scoring import KINDS, evaluate, format_table, score
from twin.synthetic_scenarios import make_scenario, synthetic_batch

KMAX = DetectConfig().watermark_kmax_bytes


@pytest.fixture(scope="module")
def geo():
    fabric = two_leaf_two_spine("small", servers=4)
    return fabric_geometry(build_port_index(fabric), fabric)


def frame(geo, hot=(), *, fan=31.0, load=0.3):
    n = geo.n_ports
    util = np.where(geo.is_leaf_host, load, 0.0).astype(np.float32)
    wm = np.full(n, 0.1 * KMAX, np.float32)
    fan_in = np.where(geo.is_leaf_host, fan, 0).astype(np.float32)
    for p in hot:
        util[p], wm[p] = 0.97, 3 * KMAX
    return {"util": util, "watermark_bytes": wm}, fan_in


def test_hot_port_needs_fan_in_pressure_and_load(geo) -> None:
    p = int(np.flatnonzero(geo.is_leaf_host)[0])
    m, fan = frame(geo, [p])
    _, found = detect_window(m, geo, MovingState.initial(geo.n_ports), DetectConfig(), fan_in=fan)
    assert found.hot_ports.tolist() == [p]
    # Few senders: a congested port, not an incast.
    m, fan = frame(geo, [p], fan=2)
    _, found = detect_window(m, geo, MovingState.initial(geo.n_ports), DetectConfig(), fan_in=fan)
    assert not found.incast
    # Queue pressure without load (a balanced microburst) is not an incast either.
    m, fan = frame(geo)
    m["watermark_bytes"][p] = 3 * KMAX
    _, found = detect_window(m, geo, MovingState.initial(geo.n_ports), DetectConfig(), fan_in=fan)
    assert not found.incast


def test_a_port_is_judged_against_its_own_switch_not_the_fabric(geo) -> None:
    """Each switch's rates cover its own poll instants: with a job's traffic in bursts as long as
    the poll, one leaf can read twice another's load. That leaf is not an incast (every port of
    it looked 1.6x hot against the fabric's mean at 16,896 ports); a port twice its own leaf's
    peers is, though the other leaf's load makes it no hotter than the fabric's mean."""
    r0, r1 = (np.flatnonzero(geo.is_leaf_host & (geo.index.rail == r)) for r in (0, 1))
    m, fan = frame(geo, load=0.2)
    m["util"][r1] = 0.9  # leaf-r1's sample caught the burst; leaf-r0's mostly the gap
    m["watermark_bytes"][:] = 3 * KMAX  # the all-to-all fills every queue: pressure everywhere
    _, found = detect_window(m, geo, MovingState.initial(geo.n_ports), DetectConfig(), fan_in=fan)
    assert not found.incast, found.hot_ports
    hot = int(r0[1])
    m["util"][hot] = 0.45  # 2.25x its leaf's others, below the fabric's mean (0.58)
    _, found = detect_window(m, geo, MovingState.initial(geo.n_ports), DetectConfig(), fan_in=fan)
    assert found.hot_ports.tolist() == [hot]


def test_subsets_of_one_place_in_every_su_are_one_hot_set() -> None:
    """Three SUs, one EP group each, the hot expert at GPU 1 of the third server of every SU: the
    same port of each SU's rail-1 leaf. Windows that catch different SUs' copies over the
    threshold are one hotspot (J over ports: 0 window to window); the expert moving to GPU 0
    (rail 0) is a migration."""
    from fabricmon.core.topology.railgen import rail_optimized

    fabric = rail_optimized("three-su", servers=12, gpus_per_server=2, spines=2, servers_per_su=4)
    g = fabric_geometry(build_port_index(fabric), fabric)
    host = np.flatnonzero(g.is_leaf_host)
    place_of = {(g.host_names[g.host_of[p]], int(g.gpu_of[p])): p for p in host}
    at_gpu1 = [place_of[(f"node{3 + 4 * su:03d}", 1)] for su in range(3)]
    at_gpu0 = [place_of[(f"node{3 + 4 * su:03d}", 0)] for su in range(3)]
    assert len({int(g.place[p]) for p in at_gpu1}) == 1 and g.place[at_gpu1[0]] != g.place[at_gpu0[0]]
    cfg, state, migrations = DetectConfig(), MovingState.initial(g.n_ports), []
    for w in range(12):
        m, fan = frame(g, [at_gpu1[w % 3]] if w % 4 else at_gpu1[:2])  # one SU's copy, or two
        state, found = detect_window(m, g, state, cfg, fan_in=fan)
        migrations.append(found.migrated)
    assert not any(migrations), migrations
    m, fan = frame(g, at_gpu0[:2])
    state, found = detect_window(m, g, state, cfg, fan_in=fan)
    assert found.migrated and found.rail_jump and found.jaccard == 0.0


def _three_su():
    from fabricmon.core.topology.railgen import rail_optimized

    fabric = rail_optimized("three-su", servers=12, gpus_per_server=2, spines=2, servers_per_su=4)
    g = fabric_geometry(build_port_index(fabric), fabric)
    place_of = {(g.host_names[g.host_of[p]], int(g.gpu_of[p])): p for p in np.flatnonzero(g.is_leaf_host)}
    return g, [[place_of[(f"node{3 + 4 * su:03d}", gpu)] for su in range(3)] for gpu in (0, 1)]


def test_a_move_seen_in_one_su_of_three_is_raised_when_a_second_window_confirms_it() -> None:
    """Selective confirmation: the expert's move to GPU 0 seen in one SU of three (below
    migration_clean_su_share) is a candidate; the next window at the same place confirms it, and
    the migration is dated and named at its first sight, from the hot set it left."""
    g, (at_gpu0, at_gpu1) = _three_su()
    cfg = DetectConfig()

    def run(*hot_sets: list[int], cfg: DetectConfig = cfg) -> list:  # type: ignore[type-arg]
        state, out = MovingState.initial(g.n_ports), []
        for w, hot in enumerate(hot_sets):
            m, fan = frame(g, hot)
            state, found = detect_window(m, g, state, cfg, fan_in=fan, ts_ns=w)
            out.append(found)
        return out

    found = run(at_gpu1, at_gpu1, at_gpu0[:1], at_gpu0[1:2], at_gpu0[1:])
    assert [f.migrated for f in found] == [False, False, False, True, False]
    hop = found[3]
    assert (hop.moved_ts_ns, hop.moved_ports.tolist(), sorted(hop.from_ports.tolist())) == (
        2, [at_gpu0[0]], sorted(at_gpu1))
    assert hop.rail_jump and trajectory_step(hop, g).ts_ns == 2
    # a one-window flicker to another place, then back: no move either way
    assert not any(f.migrated for f in run(at_gpu1, at_gpu1, at_gpu0[:1], at_gpu1, at_gpu1))
    # a move seen in two SUs of three is clean: raised the window it is seen, dated then
    clean = run(at_gpu1, at_gpu1, at_gpu0[:2], at_gpu0)
    assert [f.migrated for f in clean] == [False, False, True, False] and clean[2].moved_ts_ns == 2
    # an empty window between first sight and confirmation (within the gap bound) still confirms
    assert [f.migrated for f in run(at_gpu1, at_gpu0[:1], [], at_gpu0[2:])] == [False, False, False, True]
    # 1: every move raised at once (the rule before confirmation)
    once = run(at_gpu1, at_gpu1, at_gpu0[:1], at_gpu0[1:2], cfg=DetectConfig(migration_confirm_windows=1))
    assert [f.migrated for f in once] == [False, False, True, False]


def test_part_of_a_hot_set_moving_waits_for_confirmation(geo) -> None:
    """In one SU: two new hot ports beside the one that stays (J = 1/3, a move by the Jaccard
    rule) hold 2/3 of the hot set, below migration_clean_place_share: raised once the next window
    has them without it."""
    host = np.flatnonzero(geo.is_leaf_host)
    a, b, c = int(host[0]), int(host[5]), int(host[6])
    state, got = MovingState.initial(geo.n_ports), []
    for w, hot in enumerate([[a], [a], [a, b, c], [b, c]]):
        m, fan = frame(geo, hot)
        state, found = detect_window(m, geo, state, DetectConfig(), fan_in=fan, ts_ns=w)
        got.append((found.migrated, found.moved_ports.tolist(), found.moved_ts_ns))
    assert got == [(False, [], 0), (False, [], 0), (False, [], 0), (True, [b, c], 2)]
    with pytest.raises(ValueError, match="migration_confirm_windows"):
        DetectConfig(migration_confirm_windows=0)
    with pytest.raises(ValueError, match="migration_clean_su_share"):
        DetectConfig(migration_clean_su_share=1.5)


def test_a_hotspot_cycling_among_ports_migrates_at_every_hop(geo) -> None:
    """In one SU a place is a port: a hot port that hops A → B → C → A … every two windows (the
    live heatmap's e2e feeder) migrates at every hop, revisits included."""
    host = np.flatnonzero(geo.is_leaf_host)
    cycle = [host[0], host[5], host[2]]
    cfg, state, migrations = DetectConfig(), MovingState.initial(geo.n_ports), []
    for w in range(18):
        m, fan = frame(geo, [cycle[(w // 2) % 3]])
        state, found = detect_window(m, geo, state, cfg, fan_in=fan)
        migrations.append(found.migrated)
    assert migrations == [w > 0 and w % 2 == 0 for w in range(18)], migrations


def test_moving_hot_set_reports_jaccard_jumps_dwell_and_trajectory(geo) -> None:
    host = np.flatnonzero(geo.is_leaf_host)
    a, b = int(host[0]), int(host[-1])  # leaf-r0 → leaf-r1: a rail and leaf jump
    cfg = DetectConfig()
    state = MovingState.initial(geo.n_ports)
    for _ in range(3):
        state, found = detect_window(*frame(geo, [a])[:1], geo, state, cfg, fan_in=frame(geo, [a])[1])
    assert not found.moving and found.hot_dwell_windows.tolist() == [3]
    m, fan = frame(geo, [b])
    state, found = detect_window(m, geo, state, cfg, fan_in=fan, ts_ns=7)
    assert found.migrated and found.moving and found.jaccard == 0.0 and found.migration_rate == 1.0
    assert found.leaf_jump and found.rail_jump and found.mean_dwell_windows == 3.0
    step = trajectory_step(found, geo)
    assert (
        step.ports == (f"leaf-r1:{geo.index.port_names[b]}",)
        and step.hosts == ("node004",)
        and step.gpus == (1,)
    )
    kinds = [c.kind for c in conditions(found, geo)]
    assert kinds == ["moving_incast"]  # per-port incast inhibited while it moves


def test_a_hotspot_that_moves_through_an_empty_window_still_migrated(geo) -> None:
    # soak: the twin's hotspot moved while one tick had no queue telemetry (H empty for a window);
    # judged against that empty window the move was never a migration and left no trajectory step
    host = np.flatnonzero(geo.is_leaf_host)
    a, b = int(host[0]), int(host[-1])
    cfg = DetectConfig()
    state = MovingState.initial(geo.n_ports)
    for t in range(3):
        m, fan = frame(geo, [a])
        state, found = detect_window(m, geo, state, cfg, fan_in=fan, ts_ns=t)
        assert not len(found.from_ports)
    m, fan = frame(geo)
    state, found = detect_window(m, geo, state, cfg, fan_in=fan, ts_ns=3)
    assert not found.incast and not found.migrated
    m, fan = frame(geo, [b])
    state, found = detect_window(m, geo, state, cfg, fan_in=fan, ts_ns=4)
    assert found.migrated and found.hot_ports.tolist() == [b] and found.mean_dwell_windows == 3.0
    # where it came from, and when that set was last seen (before the empty window)
    assert found.from_ports.tolist() == [a] and found.from_ts_ns == 2
    # a hot set further back than migration_gap_windows is gone: a new hotspot is not a migration
    for _ in range(cfg.migration_gap_windows):
        m, fan = frame(geo)
        state, found = detect_window(m, geo, state, cfg, fan_in=fan)
    m, fan = frame(geo, [a])
    state, found = detect_window(m, geo, state, cfg, fan_in=fan)
    assert found.incast and not found.migrated


def test_a_hotspot_that_moves_across_a_quiet_fabric_still_migrated(geo) -> None:
    # 16,896-port scale run: a 5,632-GPU job's steps are seconds apart, the fabric idle between
    # them; a hotspot that moved from one step to the next came back after more quiet windows than
    # migration_gap_windows, and was judged a hotspot appearing, not moving
    host = np.flatnonzero(geo.is_leaf_host)
    a, b = int(host[0]), int(host[-1])
    cfg = DetectConfig()
    assert cfg.migration_quiet_windows > cfg.migration_gap_windows

    def window(state: MovingState, hot: list[int], load: float = 0.3):  # type: ignore[no-untyped-def]
        m, fan = frame(geo, hot, load=load)
        return detect_window(m, geo, state, cfg, fan_in=fan)

    def run(hot_then: list[int], empties: int, load: float) -> bool:
        state = MovingState.initial(geo.n_ports)
        for _ in range(3):
            state, _found = window(state, hot_then)
        for _ in range(empties):
            state, found = window(state, [], load)
            assert not found.incast
        state, found = window(state, [b])
        assert found.incast
        return found.migrated

    gap, quiet = cfg.migration_gap_windows, cfg.migration_quiet_windows
    assert run([a], quiet + gap - 1, load=0.0)  # quiet windows do not end the hotspot …
    # … up to a bound, past which they count as the loaded ones do: a long pause starts afresh
    assert not run([a], quiet + gap, load=0.0)
    assert not run([a], gap, load=0.3)  # loaded windows with nothing hot do end it
    # quiet is below rel_load_floor on every candidate port (a trickle counts as quiet, load does not)
    assert run([a], gap + 2, load=0.5 * cfg.rel_load_floor)
    assert not run([a], gap + 2, load=2 * cfg.rel_load_floor)


def test_a_hotspot_that_moves_within_one_poll_still_migrated(geo) -> None:
    # 16,896-port scale run: the poll straddling the move saw the old place and the new one hot
    # together (J = 0.5 against either neighbour, never <= J_max), and the move went unseen
    host = np.flatnonzero(geo.is_leaf_host)
    a, b, c = int(host[0]), int(host[-1]), int(host[3])
    cfg = DetectConfig()

    def windows(*hot_sets: list[int]) -> list[bool]:
        state, out = MovingState.initial(geo.n_ports), []
        for hot in hot_sets:
            m, fan = frame(geo, hot)
            state, found = detect_window(m, geo, state, cfg, fan_in=fan)
            out.append(found.migrated)
            if found.migrated:
                assert found.from_ports.tolist() == [a]  # from where it was before the straddle
        return out

    assert windows([a], [a], [a, b], [b]) == [False, False, False, True]
    # a port warm for a window beside a hotspot that stays is no move, before or after
    assert windows([a], [a], [a, b], [a], [a]) == [False] * 5
    # straddling longer than migration_gap_windows: the mixed set is the hot set from then on
    mixed = [[a, b]] * cfg.migration_gap_windows
    assert windows([a], *mixed, [b]) == [False] * (1 + len(mixed)) + [False]
    assert windows([a], [a, b], [c]) == [False, False, True]


def test_a_move_first_seen_beside_the_place_it_left_is_dated_there(geo) -> None:
    """A straddle holds the hot set it moved from, and the move is raised a window later; it was
    first seen in the straddle, so that is when it moved (the trajectory's step and the scale run's
    scoring: 16,896 ports, a hop raised 2.5 s after it, one window past the tolerance). A move that
    lands elsewhere is dated where it is seen."""
    host = np.flatnonzero(geo.is_leaf_host)
    a, b, c = int(host[0]), int(host[-1]), int(host[3])
    cfg = DetectConfig()

    def moves(*hot_sets: list[int]) -> list[tuple[int, int]]:
        state, out = MovingState.initial(geo.n_ports), []
        for k, hot in enumerate(hot_sets, start=1):
            m, fan = frame(geo, hot)
            state, found = detect_window(m, geo, state, cfg, fan_in=fan, ts_ns=k * 10**9)
            if found.migrated:
                out.append((k, found.moved_ts_ns // 10**9))
        return out

    assert moves([a], [a], [a, b], [b]) == [(4, 3)]
    assert moves([a], [a, b], [a, b], [b]) == [(4, 2)]  # the first window it was seen in
    assert moves([a], [a, b], [c]) == [(3, 3)]  # not where the straddle's new port was
    assert moves([a], [a, b], [b], [b, c], [c]) == [(3, 2), (5, 4)]  # each straddle dates its own move


def test_idle_ports_without_queue_telemetry_are_never_hot(geo) -> None:
    # soak: an unused spine (every port at 0) whose gNMI sample was missing for a tick had every
    # port judged hot — 0 ≥ 1.6 × 0, and no telemetry counts as pressure
    m, _fan = frame(geo)
    util = np.where(geo.is_spine, 0.0, m["util"]).astype(np.float32)
    wm = np.where(geo.is_spine, np.nan, m["watermark_bytes"]).astype(np.float32)
    # fan-in unknown (no run known for the window): the counters alone decide, as in the soak
    _, found = detect_window({"util": util, "watermark_bytes": wm}, geo, MovingState.initial(geo.n_ports),
                             DetectConfig())
    assert not found.incast, found.hot_ports


def test_pfc_storm_ecmp_imbalance_rail_violation_and_target_down(geo) -> None:
    m, fan = frame(geo)
    n = geo.n_ports
    up = geo.uplink_ports
    m["util"][up] = 0.3
    m["util"][up[0]] = 0.95  # one uplink of leaf-r0 carries the collided elephants
    m["pfc_paused_fraction"] = np.zeros(n, np.float32)
    m["pfc_paused_fraction"][0] = 0.9
    spine = np.flatnonzero(geo.is_spine)
    m["util"][spine[: len(spine) // 2]] = np.nan  # spine0 did not answer
    confined = np.array([True, False, False, False])
    state, cfg = MovingState.initial(n), DetectConfig()
    names = geo.index.switch_names
    for window in range(cfg.down_windows):  # a switch is down after down_windows without data
        state, found = detect_window(m, geo, state, cfg, fan_in=fan, rail_confined_switch=confined)
        if window < cfg.down_windows - 1:
            assert len(found.down_switches) == 0, "one late or lost poll is not an outage"
    assert [names[s] for s in found.ecmp_switches] == ["leaf-r0"]
    assert found.storm_ports.tolist() == [0]
    assert [names[s] for s in found.down_switches] == ["spine0"]
    assert set(geo.index.switch_of[found.rail_violation_ports]) == {0}
    kinds = sorted(c.kind for c in conditions(found, geo))
    assert kinds == ["ecmp_imbalance", "pfc_storm", "rail_violation", "target_down"]


def test_most_of_the_fabric_silent_at_once_is_one_alert_not_one_per_switch(geo) -> None:
    """At 16,896 ports a saturated box stalled every gNMI stream for ~3 s: 184 target_down alerts
    said one thing. More than half the switches down at once is one fabric-wide alert; half or fewer
    are each their own (one switch down stays one switch's alert: the test above)."""
    names = geo.index.switch_names
    cfg = DetectConfig()

    def down_after(silent: list[str]) -> list[Condition]:
        m, fan = frame(geo)
        gone = np.isin(geo.index.switch_of, [names.index(n) for n in silent])
        m["util"][gone], m["watermark_bytes"][gone] = np.nan, np.nan
        state = MovingState.initial(geo.n_ports)
        for _ in range(cfg.down_windows):
            state, found = detect_window(m, geo, state, cfg, fan_in=fan)
        return [c for c in conditions(found, geo) if c.kind == "target_down"]

    everything = down_after(list(names))
    assert [(c.key, c.details["switches_down"], c.details["switches"]) for c in everything] == [
        ("fabric", len(names), len(names))]
    assert everything[0].summary.startswith(f"{len(names)} of {len(names)} switches without data at once")
    three = down_after(list(names[:3]))
    assert [c.key for c in three] == ["fabric"] and three[0].details["first"] == list(names[:3])
    assert sorted(c.key for c in down_after(list(names[:2]))) == sorted(names[:2])  # half: each its own
    with pytest.raises(ValueError, match="down_rollup_fraction"):
        DetectConfig(down_rollup_fraction=1.5)


def test_config_from_mapping_names_bad_keys_and_values() -> None:
    assert DetectConfig.from_mapping({"fan_in_min": "6"}).fan_in_min == 6.0
    with pytest.raises(ValueError, match=r"unknown setting.*bogus"):
        DetectConfig.from_mapping({"bogus": 1})
    with pytest.raises(ValueError, match=r"jaccard_max"):
        DetectConfig.from_mapping({"jaccard_max": 2})
    with pytest.raises(ValueError, match=r"top_m=.*int"):
        DetectConfig.from_mapping({"top_m": "many"})


def test_bad_metric_shape_is_a_clear_error(geo) -> None:
    with pytest.raises(ValueError, match=r"watermark_bytes.*shape"):
        detect_window(
            {"util": np.zeros(geo.n_ports, np.float32), "watermark_bytes": np.zeros(3, np.float32)},
            geo,
            MovingState.initial(geo.n_ports),
            DetectConfig(),
        )


def test_lifecycle_for_duration_keep_firing_and_dedup() -> None:
    c = Condition("incast", "leaf-r0:Ethernet1", "x")
    cfg = {"incast": LifecycleConfig(for_s=2.0, keep_firing_s=2.0)}
    s = 1_000_000_000
    slots, tr = advance({}, [c, c], 0, fabric="f", config=cfg)  # duplicate condition: one slot
    assert [t.to_state for t in tr] == ["pending"] and len(slots) == 1
    slots, tr = advance(slots, [], 1 * s, fabric="f", config=cfg)  # one-window blip: dropped
    assert [t.to_state for t in tr] == ["inactive"] and not slots
    for t in range(2, 5):
        slots, tr = advance(slots, [c], t * s, fabric="f", config=cfg)
    fp = fingerprint("f", "incast", "leaf-r0:Ethernet1")
    assert slots[fp].state == "firing" and slots[fp].active_since_ns == 2 * s
    slots, tr = advance(slots, [], 5 * s, fabric="f", config=cfg)  # blink: keeps firing
    assert tr == [] and slots[fp].state == "firing"
    slots, tr = advance(slots, [c], 6 * s, fabric="f", config=cfg)
    assert tr == []  # no re-fire, same alert
    slots, tr = advance(slots, [], 8 * s, fabric="f", config=cfg)
    assert [(t.from_state, t.to_state) for t in tr] == [("firing", "resolved")]


def test_unknown_scenario_kind_is_named() -> None:
    with pytest.raises(ValueError, match=r"unknown scenario kind 'x'"):
        make_scenario("x", 0)


@pytest.mark.slow
def test_balanced_ten_minutes_raise_no_alert_at_all() -> None:
    for seed in range(3):
        scn = make_scenario("balanced", seed)
        assert scn.n_windows == 600
        res = evaluate(scn)
        assert res.first_firing == {}, (seed, res.first_firing)


@pytest.mark.slow
def test_detection_quality_on_seeded_scenarios() -> None:
    """≥ 20 seeds per kind: moving-incast recall/precision ≥ 0.95, alerts within 2 windows."""
    result = score(seeds=20, batch=synthetic_batch())
    print("\n" + format_table(result))
    table = result["table"]
    assert result["moving_recall"] >= 0.95 and result["moving_precision"] >= 0.95
    assert result["moving_window_recall"] >= 0.95 and result["moving_window_precision"] >= 0.95
    assert table["balanced"]["none"] == 20 and sum(table["balanced"].values()) == 20
    for kind in KINDS:
        lat = result["latency_windows"][kind]
        if kind != "balanced":
            assert len(lat) == 20, kind  # the expected alert fired on every seed
            assert max(lat) <= 2, (kind, lat)
    assert table["static"]["moving_incast"] == 0
    assert table["ecmp"]["incast"] == table["pfc"]["incast"] == 0


def _without_queue_telemetry(batch):  # type: ignore[no-untyped-def]
    """The same scenarios as an SNMP-only fabric sees them: no watermark, ECN or PFC counters."""
    def make(kind, seeds):  # type: ignore[no-untyped-def]
        return [replace(s, metrics={k: v for k, v in s.metrics.items() if k not in PRESSURE_METRICS})
                for s in batch(kind, seeds)]
    return make


@pytest.mark.slow
def test_snmp_only_fabrics_still_see_incast_by_load_and_fan_in() -> None:
    """Without queue telemetry the incast rule judges load against peers and fan-in alone: the
    hot set of a static or moving incast is still found (lower confidence, said in the alert),
    and a balanced all-to-all raises nothing."""
    result = score(seeds=20, batch=_without_queue_telemetry(synthetic_batch()))
    print("\n" + format_table(result))
    table = result["table"]
    assert result["moving_recall"] >= 0.9 and result["moving_precision"] >= 0.9
    assert table["balanced"]["none"] == 20
    assert table["static"]["incast"] == 20 and table["static"]["moving_incast"] == 0
    scn = make_scenario("static", 3)
    geo, cfg = scn.geo, DetectConfig()
    state = MovingState.initial(geo.n_ports)
    for t in range(scn.n_windows):
        frame = {k: v[t] for k, v in scn.metrics.items() if k not in PRESSURE_METRICS}
        state, found = detect_window(frame, geo, state, cfg, fan_in=scn.fan_in[t])
        if found.incast:
            break
    assert found.incast and not found.pressure_known
    cond = next(c for c in conditions(found, geo) if c.kind == "incast")
    assert cond.details["confidence"] == "low" and "no queue telemetry" in cond.summary
