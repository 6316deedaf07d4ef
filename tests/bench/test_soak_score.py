"""The soak's scoring (bench/soak_score.py) on hand-made inputs: what counts as a lost tick, a
true migration, a detected one, a false alert, and p95."""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from soak_score import (
    NS,
    Detection,
    Migration,
    Stretch,
    balanced_spans,
    culprit_naming,
    false_alerts,
    first_alert_delay_s,
    lost_ticks,
    merge_stretches,
    p95,
    score_migrations,
    true_migrations,
    watching_from_ns,
    without,
)


def test_lost_ticks_counts_missing_and_empty_frames_outside_the_outage() -> None:
    frames = [(t * NS, t != 4) for t in range(10) if t not in (2, 7)]  # 2, 7 missing; 4 no data
    got = lost_ticks(frames, NS)
    assert (got.expected, got.missing, got.no_data) == (10, 2, 1) and got.missing_ts == (2 * NS, 7 * NS)
    outage = lost_ticks(frames, NS, exclude=[(6 * NS, 8 * NS)])  # Redis down 6–8 s: 7 is excused
    assert (outage.expected, outage.missing) == (7, 1)
    assert lost_ticks([], NS).expected == 0


def test_stretches_merge_across_overlapping_answers_and_migrations_need_dwell() -> None:
    raw = [{"start_ns": 0, "end_ns": 5 * NS, "hot_gpu": 1, "port": "a"},
           {"start_ns": 3 * NS, "end_ns": 9 * NS, "hot_gpu": 1, "port": "a"},  # the next answer overlaps
           {"start_ns": 9 * NS, "end_ns": 9 * NS + NS // 5, "hot_gpu": 2, "port": "b"},  # 200 ms blip
           {"start_ns": 9 * NS + NS // 5, "end_ns": 20 * NS, "hot_gpu": 3, "port": "c"},
           {"start_ns": 20 * NS, "end_ns": 40 * NS, "hot_gpu": -1, "port": ""},
           {"start_ns": 40 * NS, "end_ns": 50 * NS, "hot_gpu": 4, "port": "d"}]
    st = merge_stretches(raw)
    assert [(s.hot_gpu, s.start_ns // NS, s.end_ns // NS) for s in st][:2] == [(1, 0, 9), (2, 9, 9)]
    moves = true_migrations(st, 2 * NS)
    # b lived 200 ms: no move to or from it, but the hotspot did move from a to c when c began;
    # c→balanced→d is an onset, not a migration
    assert moves == [Migration(9 * NS + NS // 5, "a", "c")]
    # a blip that returns to where it was is no move at all
    back = [Stretch(0, 10 * NS, 1, "a"), Stretch(10 * NS, 10 * NS + NS // 5, 2, "b"),
            Stretch(10 * NS + NS // 5, 30 * NS, 1, "a")]
    assert true_migrations(back, 2 * NS) == []
    st2 = [Stretch(0, 10 * NS, 1, "a"), Stretch(10 * NS, 20 * NS, 2, "b"), Stretch(20 * NS, 30 * NS, 3, "c")]
    assert true_migrations(st2, 2 * NS) == [Migration(10 * NS, "a", "b"), Migration(20 * NS, "b", "c")]


def test_a_hotspot_across_the_jobs_backward_pass_is_one_stretch_and_owns_the_gap() -> None:
    """A job with a 2 s backward pass (the scale bench's): each step's all-to-alls are a few seconds
    of phase events, then 2 s with none. /hotspots answers for successive windows cut one hotspot
    into per-step pieces; merged across the step gap it is one stretch. A one-step hotspot (0.4 s
    of events, then the gap) held the fabric until the next step began, 2.4 s: a poll sees it."""
    raw = [{"start_ns": 0, "end_ns": 3 * NS, "hot_gpu": 1, "port": "a"},
           {"start_ns": 5 * NS, "end_ns": 8 * NS, "hot_gpu": 1, "port": "a"},  # next answer, next step
           {"start_ns": 10 * NS, "end_ns": 10 * NS + 4 * NS // 10, "hot_gpu": 2, "port": "b"},  # one step
           {"start_ns": 12 * NS + 4 * NS // 10, "end_ns": 20 * NS, "hot_gpu": 3, "port": "c"}]
    assert len(merge_stretches(raw)) == 4  # the demo's default gap: a 2 s pause splits it
    st = merge_stretches(raw, gap_ns=2 * NS + NS // 2)
    assert [(s.hot_gpu, s.start_ns // NS, s.end_ns // NS) for s in st] == [(1, 0, 8), (2, 10, 10), (3, 12, 20)]
    assert true_migrations(st, 2 * NS) == [Migration(10 * NS, "a", "b"),
                                           Migration(12 * NS + 4 * NS // 10, "b", "c")]


def test_recall_and_precision_match_ports_within_the_tolerance() -> None:
    truth = [Migration(10 * NS, "a", "b"), Migration(20 * NS, "b", "c"), Migration(30 * NS, "c", "d")]
    dets = [Detection(11 * NS, ("b",)), Detection(21 * NS, ("x", "c")), Detection(36 * NS, ("d",)),
            Detection(50 * NS, ("q",))]
    r = score_migrations(truth, dets, 2 * NS)
    assert (r.migrations, r.detected, r.detections, r.correct) == (3, 2, 4, 2)
    assert r.recall == 2 / 3 and r.precision == 0.5
    judged = score_migrations(truth, dets, 2 * NS, judged=[(15 * NS, 40 * NS)])
    assert (judged.migrations, judged.detections) == (2, 2)
    assert math.isnan(score_migrations([], [], NS).recall)


def test_a_job_of_several_groups_migrates_to_every_groups_port() -> None:
    """One hot expert in each of several EP groups: the hot set names any of the groups' ports
    (capped to its top 16 of 22 at 16,896 ports), and any of them is the migration's port."""
    raw = [{"start_ns": 0, "end_ns": 10 * NS, "hot_gpu": 1, "port": "a0", "ports": ["a0", "a1"]},
           {"start_ns": 10 * NS, "end_ns": 20 * NS, "hot_gpu": 2, "port": "b0", "ports": ["b0", "b1"]}]
    [move] = true_migrations(merge_stretches(raw), 2 * NS)
    assert move.to_ports == ("b0", "b1")
    r = score_migrations([move], [Detection(11 * NS, ("b1", "x"))], 2 * NS)
    assert (r.detected, r.correct) == (1, 1)
    assert score_migrations([move], [Detection(11 * NS, ("a1",))], 2 * NS).detected == 0


def test_an_alert_firing_in_a_balanced_stretch_after_its_grace_is_false() -> None:
    spans = balanced_spans([Stretch(0, 10 * NS, 1, "a"), Stretch(10 * NS, 60 * NS, -1, "")], 20 * NS)
    assert spans == [(30 * NS, 60 * NS)]
    fired = [("moving_incast", 12 * NS), ("incast", 31 * NS), ("incast", 61 * NS)]
    assert false_alerts(fired, spans) == [("incast", 31 * NS)]


def test_judged_spans_leave_out_the_outages() -> None:
    assert without((0, 100), []) == [(0, 100)]
    assert without((0, 100), [(40, 50), (45, 60), (-10, 5), (95, 120)]) == [(5, 40), (60, 95)]
    assert without((10, 20), [(0, 30)]) == []
    assert without((10, 20), [(30, 40)]) == [(10, 20)]


def test_p95() -> None:
    assert p95(list(range(1, 101))) == 95 and math.isnan(p95([]))


def test_first_alert_delay_is_from_the_first_migration_to_the_first_moving_alert() -> None:
    truth = [Migration(10 * NS, "a", "b"), Migration(30 * NS, "b", "c")]
    assert first_alert_delay_s(truth, [32 * NS, 11 * NS + NS // 2]) == 1.5
    assert first_alert_delay_s(truth, [8 * NS]) == 0.0  # fired on an earlier, shorter hop
    assert math.isnan(first_alert_delay_s([], [8 * NS])) and math.isnan(first_alert_delay_s(truth, []))


def test_migrations_are_judged_once_collection_covers_the_fabric() -> None:
    """At 16,896 ports the streams come up over ~25 s with empty frames between: the twin's first
    migration in that gap was "seen" 10 s late, though no frame had data on where it came from."""
    detail = [(0, {"util": 0}), (NS, {"util": 192, "watermark_bytes": 192}), (2 * NS, {"util": 0}),
              (3 * NS, {"util": 11_584}), (4 * NS, {"util": 16_896, "watermark_bytes": 16_896}),
              (5 * NS, {"util": 8_000})]
    assert watching_from_ns(detail, 16_896) == 4 * NS
    assert watching_from_ns(detail[:4], 16_896) is None
    assert watching_from_ns([(7, {"util": 768})], 768) == 7  # the demo's fabric: the first frame


def test_culprit_naming_counts_run_attributed_incast_alerts_inside_the_span() -> None:
    alerts = [("incast", 5 * NS, "job", "dispatch", True), ("incast", 6 * NS, "job", "", True),
              ("moving_incast", 7 * NS, "job", "combine", True), ("incast", 8 * NS, "", "", False),  # spine
              ("target_down", 9 * NS, "", "", False), ("incast", 99 * NS, "job", "", True),  # after the span
              ("incast", 10 * NS, "job", "", False)]  # between the sampling job's reported blocks
    got = culprit_naming(alerts, (0, 50 * NS))
    assert (got.attributed, got.named, got.unreported) == (4, 2, 1)
    assert got.share == 2 / 3 and got.share_all == 0.5  # judged among what the job's events could name
    assert math.isnan(culprit_naming([], (0, NS)).share)
