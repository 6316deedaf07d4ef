"""Storage retention and run budgets (jobs.retention, alerts.retention), on real database rows
written through the real ingest path: old event blocks go with their idempotency keys, an ended
run's matrices go after their days, a run over its budget loses its oldest whole steps, alert
history goes while open alerts stay — and a week of a running job stays within its budget."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from fabricmon.alerts import retention as alert_retention
from fabricmon.alerts.models import Alert, AlertTransition, Episode, Outbox, Receiver
from fabricmon.jobs import blocks, ingest, retention, runs
from fabricmon.jobs.models import EventBlock, EventBlockKey, EventIdSet, Run, TrafficMatrix
from fabricmon.jobs.timeline import TimelineQuery, ranks_by_time
from tests.jobs.long_runs import fill_run, moe_columns

pytestmark = pytest.mark.django_db
RANKS = 8
EVENTS_PER_STEP = RANKS * 2 * 8  # ranks × (dispatch, combine) × 8 layers


@pytest.fixture
def owner():
    return get_user_model().objects.create_user("keeper", password="pw")


def _age_blocks(run: Run, days: float) -> None:
    EventBlock.objects.filter(run=run).update(created_at=timezone.now() - timedelta(days=days))


def test_old_event_blocks_go_with_their_keys_and_a_repost_is_stored_again(owner, settings) -> None:
    settings.FABRICMON_EVENTS_RETENTION_DAYS = 14
    run = runs.create_run(owner, "aged", world_size=RANKS)
    fill_run(run, 2000, RANKS, per_block=500)
    _age_blocks(run, 20)
    fill_run(run, 1000, RANKS, per_block=500, first=2000)  # stored now: kept
    report = retention.prune()
    assert (report.blocks, report.events) == (4, 2000) and report.keys == 2000
    assert blocks.event_count(run) == 1000 and _keys(run) == 1000
    assert not EventBlockKey.objects.filter(run=run, block__isnull=True).exists()
    run.refresh_from_db()
    assert "FABRICMON_EVENTS_RETENTION_DAYS=14" in run.pruned_note and run.stored_bytes > 0
    again = ingest.store_columns(run, moe_columns(0, 500, RANKS))  # an old event re-posted
    assert again.stored == 500


def _keys(run: Run) -> int:
    """Event ids the run's claim rows hold (one bit each)."""
    return sum((bits & (2**64 - 1)).bit_count() for bits in EventIdSet.objects.filter(run=run).values_list(
        "bits", flat=True))


def test_an_ended_runs_matrices_go_after_their_days(owner, settings) -> None:
    settings.FABRICMON_MATRICES_RETENTION_DAYS = 30
    old, recent = (runs.create_run(owner, name, world_size=RANKS) for name in ("old", "recent"))
    for run in (old, recent):
        fill_run(run, EVENTS_PER_STEP * 2, RANKS, peers=True)
        runs.end_run(run)
    Run.objects.filter(pk=old.pk).update(ended_at=timezone.now() - timedelta(days=31))
    report = retention.prune()
    assert report.matrices == 2 * 16 and not TrafficMatrix.objects.filter(run=old).exists()
    assert TrafficMatrix.objects.filter(run=recent).count() == 2 * 16
    assert blocks.event_count(old) == EVENTS_PER_STEP * 2  # events follow their own retention
    old.refresh_from_db()
    assert "matrices deleted 30 days after the run ended" in old.pruned_note


def test_a_run_over_its_budget_loses_its_oldest_whole_steps(owner, settings) -> None:
    run = runs.create_run(owner, "big", world_size=RANKS)
    fill_run(run, EVENTS_PER_STEP * 40, RANKS, per_block=EVENTS_PER_STEP, peers=True)  # 40 steps
    full = retention.usage(run).total
    settings.FABRICMON_RUN_BUDGET_MB = full / 2 / 1e6
    report = retention.prune()
    assert report.runs_cut == ["big"]
    run.refresh_from_db()
    kept = retention.usage(run).total
    assert kept <= 0.9 * full / 2 and kept == run.stored_bytes
    cut = run.pruned_below_step
    assert cut is not None and 20 <= cut < 40
    steps = set(EventBlockKey.objects.filter(run=run).values_list("step", flat=True))
    assert steps == set(range(cut, 40))  # whole steps, the newest
    assert set(TrafficMatrix.objects.filter(run=run).values_list("step", flat=True)) == set(range(cut, 40))
    assert "budget" in run.pruned_note
    tl = ranks_by_time(run, TimelineQuery())  # what is left still draws
    assert tl["events"] == (40 - cut) * EVENTS_PER_STEP
    assert retention.prune().runs_cut == []  # under budget now: nothing more goes


def test_a_budget_cut_goes_in_short_transactions_leaving_whole_newest_steps(owner, settings, monkeypatch) -> None:
    """On SQLite a transaction holds the one write lock: the cut is made of chunks of whole steps,
    oldest first, each its own transaction, and ends where a single cut would."""
    run = runs.create_run(owner, "chunked", world_size=RANKS)
    fill_run(run, EVENTS_PER_STEP * 40, RANKS, per_block=EVENTS_PER_STEP, peers=True)
    full = retention.usage(run).total
    settings.FABRICMON_RUN_BUDGET_MB = full / 2 / 1e6
    monkeypatch.setattr(retention, "CHUNK_BYTES", full // 40 * 3)  # about three steps a transaction
    report = retention.prune()
    run.refresh_from_db()
    cut = run.pruned_below_step
    assert cut is not None and 20 <= cut < 40 and report.transactions >= cut // 4
    assert set(EventBlockKey.objects.filter(run=run).values_list("step", flat=True)) == set(range(cut, 40))
    assert set(TrafficMatrix.objects.filter(run=run).values_list("step", flat=True)) == set(range(cut, 40))
    assert retention.usage(run).total <= 0.9 * full / 2
    assert f"steps below {cut} deleted" in run.pruned_note


def test_chunk_steps_covers_every_step_oldest_first_within_the_bound() -> None:
    assert retention.chunk_steps({0: 3, 1: 3, 2: 3, 3: 3}, 6) == [(0, 2), (2, 4)]
    assert retention.chunk_steps({0: 3, 1: 9, 2: 1}, 6) == [(0, 1), (1, 2), (2, 3)]  # a big step alone
    assert retention.chunk_steps({4: 1, 7: 1}, 6) == [(0, 8)]  # gaps: from 0, one past the newest
    assert retention.chunk_steps({}, 6) == []


def test_cut_step_drops_whole_steps_oldest_first() -> None:
    sizes = {0: 10, 1: 10, 2: 10, 3: 10}
    assert retention.cut_step(sizes, 40, 40) is None
    assert retention.cut_step(sizes, 40, 25) == 2  # drop 0 and 1 (20 bytes) to reach ≤ 25
    assert retention.cut_step(sizes, 40, 0) == 4


@pytest.mark.slow
def test_a_week_of_a_running_job_stays_within_its_budget(owner, settings) -> None:
    """21 rounds of 8 hours: each stores 12 steps, then the beat's pass runs with the clock moved
    on. Usage never passes the budget after a pass, and the oldest events age out."""
    settings.FABRICMON_RUN_BUDGET_MB = 1.0
    settings.FABRICMON_EVENTS_RETENTION_DAYS = 2
    run = runs.create_run(owner, "week", world_size=RANKS)
    t0 = timezone.now()
    seen = []
    for r in range(21):
        fill_run(run, EVENTS_PER_STEP * 12, RANKS, per_block=EVENTS_PER_STEP, first=r * EVENTS_PER_STEP * 12,
                 peers=True)
        now = t0 + timedelta(hours=8 * r)
        EventBlock.objects.filter(run=run, created_at__gt=t0 - timedelta(days=30)).filter(
            created_at__gte=timezone.now() - timedelta(minutes=5)).update(created_at=now)
        retention.prune(now)
        used = retention.usage(run).total
        seen.append(used)
        assert used <= 1e6, (r, used)
    assert max(seen) <= 1e6 and min(seen[5:]) > 0.5e6  # bounded, and the newest steps stay
    steps = sorted(set(EventBlockKey.objects.filter(run=run).values_list("step", flat=True)))
    assert steps[-1] == 21 * 12 - 1 and steps == list(range(steps[0], steps[-1] + 1))


def test_alert_history_goes_and_open_alerts_stay(settings) -> None:
    settings.FABRICMON_ALERTS_RETENTION_DAYS = 30
    now = timezone.now()
    old = now - timedelta(days=40)
    ep_old = Episode.objects.create(fabric="f", opened_at=old, closed_at=old, family="incast")
    ep_open = Episode.objects.create(fabric="f", opened_at=old, family="incast")
    done = Alert.objects.create(fingerprint="a", fabric="f", kind="incast", key="p1", state="resolved",
                                active_since=old, last_true=old, episode=ep_old)
    firing = Alert.objects.create(fingerprint="b", fabric="f", kind="incast", key="p2", state="firing",
                                  active_since=old, last_true=now, episode=ep_open)
    t_done = AlertTransition.objects.create(alert=done, from_state="firing", to_state="resolved", at=old)
    t_firing = AlertTransition.objects.create(alert=firing, from_state="pending", to_state="firing", at=old)
    rcv = Receiver.objects.create(name="r", kind="webhook", url="http://127.0.0.1:9/x")
    rcv2 = Receiver.objects.create(name="r2", kind="webhook", url="http://127.0.0.1:9/y")
    Outbox.objects.create(transition=t_firing, receiver=rcv, payload={}, status="sent", created_at=old,
                          next_attempt_at=old)
    pending = Outbox.objects.create(transition=t_firing, receiver=rcv2, payload={}, status="pending",
                                    created_at=old, next_attempt_at=old)
    report = alert_retention.prune_history(now)
    assert (report.alerts, report.episodes, report.notifications) == (1, 1, 1)
    assert list(Alert.objects.values_list("fingerprint", flat=True)) == ["b"]
    assert not AlertTransition.objects.filter(pk=t_done.pk).exists()
    assert AlertTransition.objects.filter(pk=t_firing.pk).exists()  # the firing alert's history stays
    assert list(Episode.objects.values_list("pk", flat=True)) == [ep_open.pk]
    assert list(Outbox.objects.values_list("pk", flat=True)) == [pending.pk]


def test_the_run_page_shows_its_disk_usage_and_what_was_pruned(owner, client, settings) -> None:
    run = runs.create_run(owner, "shown", world_size=RANKS)
    client.force_login(owner)
    assert "not measured yet" in client.get(f"/jobs/runs/{run.pk}/").content.decode()
    fill_run(run, EVENTS_PER_STEP * 4, RANKS, per_block=EVENTS_PER_STEP, peers=True)
    settings.FABRICMON_RUN_BUDGET_MB = retention.usage(run).total / 2 / 1e6
    retention.prune()
    page = client.get(f"/jobs/runs/{run.pk}/").content.decode()
    run.refresh_from_db()
    assert run.stored_bytes > 0 and "on disk (events, matrices, keys)" in page
    assert f"steps below {run.pruned_below_step} deleted" in page and "FABRICMON_RUN_BUDGET_MB" in page
