"""Storage retention and budgets for runs: what the jobs app keeps on disk as time passes.

A 256-GPU job that reports every step writes its event blocks and per-(step, layer, phase)
traffic matrices at tens of MB a minute; without limits the database grows until the disk is
full. The beat (``jobs.prune_storage``, every ``FABRICMON_PRUNE_EVERY_S``) applies, in order:

1. **Event retention** — event blocks stored more than ``FABRICMON_EVENTS_RETENTION_DAYS`` ago are
   deleted with their index rows and idempotency keys (a re-post of such an old event would be
   stored again: that is what retention means).
2. **Matrix retention** — the traffic matrices of runs that ended more than
   ``FABRICMON_MATRICES_RETENTION_DAYS`` ago are deleted (a running run's are bounded by 3.).
3. **The run budget** — a run whose blocks, matrices and keys exceed ``FABRICMON_RUN_BUDGET_MB``
   loses its oldest *steps* (their blocks and matrices together) down to 90 % of the budget, so
   what is left is the newest, whole steps; the run remembers ``pruned_below_step``.

Deletions go in chunks of at most ``CHUNK_BYTES`` (or ``CHUNK_BLOCKS`` blocks), one transaction
each, oldest steps first, so that what is left is whole newest steps after every commit: on SQLite
a transaction holds the one write lock, and the hour soak's single 30 MB cut held it for 6 s —
ingest, history and alert evaluation waited behind it. Between two chunks the write lock is left
free as long as the last chunk held it (``_let_others_write``): SQLite's busy wait is no queue, and
back-to-back chunks starved the other writers past their 20 s timeout in the next hour soak.

Every run touched, and every running run, gets its disk usage (``Run.stored_bytes``) refreshed:
the figure on its page. What was let go is written on the run (``pruned_note``) so its pages say
so rather than showing a run that seems to start later.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.db.models import F, Q, Sum
from django.db.models.functions import Length
from django.utils import timezone

from fabricmon.jobs import blocks, ingest, matrix_parts
from fabricmon.jobs.models import EventBlock, EventIdSet, MatrixPart, Run, TrafficMatrix

log = logging.getLogger(__name__)
KEY_ROW_BYTES = 64  # an EventIdSet row on disk (up to 64 event ids): 40 bytes of row and its B-tree share
BUDGET_TARGET = 0.9  # a run over its budget is cut to this share of it
CHUNK_BYTES = 4_000_000  # at most about this much is deleted in one transaction (whole steps)
CHUNK_BLOCKS = 200  # expired blocks deleted in one transaction
GAP_MIN_S = 0.2  # SQLite: the write lock is left free this long at least between two chunks ...
GAP_MAX_S = 1.0  # ... and at most this long (the pass must keep up with ingest)


@dataclass
class PruneReport:
    """What one pass let go."""

    blocks: int = 0
    events: int = 0
    keys: int = 0
    matrices: int = 0
    runs_cut: list[str] = field(default_factory=list)
    usage_refreshed: int = 0
    transactions: int = 0  # deleting transactions (each one short: CHUNK_BYTES, CHUNK_BLOCKS)
    paused_s: float = 0.0  # SQLite: time the write lock was left to others between them
    last_took_s: float = 0.0  # how long the last deleting transaction took

    def line(self) -> str:
        cut = f"; over budget: {', '.join(self.runs_cut)}" if self.runs_cut else ""
        return (f"pruned {self.blocks} blocks ({self.events} events, {self.keys} keys), "
                f"{self.matrices} matrices in {self.transactions} transactions "
                f"(the write lock left to others {self.paused_s:.1f} s between them); usage of "
                f"{self.usage_refreshed} runs refreshed{cut}")


@dataclass(frozen=True)
class Usage:
    """A run's bytes on disk, by what holds them."""

    events: int
    matrices: int
    keys: int

    @property
    def total(self) -> int:
        return self.events + self.matrices + self.keys


def usage(run: Run) -> Usage:
    """The run's bytes on disk now (its matrices' parts folded in first; then four aggregate
    queries, no blob is read)."""
    matrix_parts.settle(run)
    ev_bytes, _ = blocks.stored_bytes(run)
    agg = TrafficMatrix.objects.filter(run=run).aggregate(s=Sum(Length("sent")), r=Sum(Length("received")))
    keys = EventIdSet.objects.filter(run=run).count() * KEY_ROW_BYTES
    return Usage(ev_bytes, int(agg["s"] or 0) + int(agg["r"] or 0), keys)


def _note(run: Run, text: str) -> None:
    Run.objects.filter(pk=run.pk).update(pruned_note=text[:300])


def _delete_blocks(run: Run, ids: list[int], report: PruneReport) -> None:
    n_blocks, n_events, event_ids = blocks.delete_blocks(ids)
    report.blocks += n_blocks
    report.events += n_events
    report.keys += ingest.forget_event_ids(run, event_ids)


def _expire_events(now: datetime, report: PruneReport, touched: set[int]) -> None:
    cutoff = now - timedelta(days=settings.FABRICMON_EVENTS_RETENTION_DAYS)
    old = EventBlock.objects.filter(created_at__lt=cutoff).values_list("run_id", "id")
    by_run: dict[int, list[int]] = defaultdict(list)
    for run_id, block_id in old.iterator(chunk_size=1000):
        by_run[run_id].append(block_id)
    for run_id, ids in by_run.items():
        run = Run.objects.get(pk=run_id)
        for at in range(0, len(ids), CHUNK_BLOCKS):
            if report.transactions:
                _let_others_write(report)
            t0 = time.monotonic()
            with transaction.atomic():
                _delete_blocks(run, ids[at: at + CHUNK_BLOCKS], report)
                _note(run, f"events stored before {cutoff:%Y-%m-%d %H:%M} were deleted "
                           f"(FABRICMON_EVENTS_RETENTION_DAYS={settings.FABRICMON_EVENTS_RETENTION_DAYS})")
            report.last_took_s = time.monotonic() - t0
            report.transactions += 1
        touched.add(run_id)


def _expire_matrices(now: datetime, report: PruneReport, touched: set[int]) -> None:
    cutoff = now - timedelta(days=settings.FABRICMON_MATRICES_RETENTION_DAYS)
    ended = Run.objects.filter(ended_at__lt=cutoff, matrices__isnull=False).distinct()
    for run in ended:
        with transaction.atomic():
            matrix_parts.lock(run)
            n = TrafficMatrix.objects.filter(run=run).delete()[1].get(TrafficMatrix._meta.label, 0)
            MatrixPart.objects.filter(run=run).delete()  # (parts of a run still posting after it ended)
        report.matrices += int(n)
        days = settings.FABRICMON_MATRICES_RETENTION_DAYS
        _note(run, f"traffic matrices deleted {days:g} days after the run ended")
        touched.add(run.pk)


def _let_others_write(report: PruneReport) -> None:
    """SQLite: leave the one write lock free between two deleting transactions. Its busy wait is
    not a queue — a waiting writer polls every 100 ms at most — so back-to-back chunks from one
    thread starved everyone else: in the hour soak a 20-60 s budget cut (each chunk ~1 s on the
    loaded box) made history, alert flushes, deliveries and ingest posts fail with "database is
    locked" after the 20 s timeout. The pause is as long as the last chunk took (the pruner takes
    at most half the write time), at least two busy-wait polls, at most GAP_MAX_S."""
    if connection.vendor != "sqlite":
        return  # PostgreSQL locks rows, not the database
    pause = min(max(report.last_took_s, GAP_MIN_S), GAP_MAX_S)
    report.paused_s += pause
    time.sleep(pause)


def cut_step(step_bytes: dict[int, int], total: int, target: int) -> int | None:
    """The lowest step to keep so that dropping every step below it brings ``total`` to at most
    ``target`` (None: nothing needs to go). Whole steps go, oldest first."""
    excess = total - target
    if excess <= 0:
        return None
    freed = 0
    for step in sorted(step_bytes):
        freed += step_bytes[step]
        if freed >= excess:
            return step + 1
    return max(step_bytes) + 1 if step_bytes else None


def chunk_steps(step_bytes: dict[int, int], max_bytes: int) -> list[tuple[int, int]]:
    """Half-open step ranges [lo, hi), oldest first, covering every step in ``step_bytes`` and each
    holding at most ``max_bytes`` (or one step, when a step alone is bigger); ``hi`` of the last is
    one past the newest step."""
    out: list[tuple[int, int]] = []
    lo, held = None, 0
    for step in sorted(step_bytes):
        if lo is not None and held + step_bytes[step] > max_bytes:
            out.append((lo, step))
            lo, held = None, 0
        if lo is None:
            lo = 0 if not out else out[-1][1]
        held += step_bytes[step]
    if lo is not None:
        out.append((lo, max(step_bytes) + 1))
    return out


def _enforce_budget(run: Run, now: datetime, report: PruneReport) -> bool:
    """Cut the run's oldest steps when it is over its budget; True when it was cut."""
    budget = int(settings.FABRICMON_RUN_BUDGET_MB * 1e6)
    used = usage(run)
    if used.total <= budget:
        return False
    per_step: dict[int, int] = defaultdict(int)
    block_rows = blocks.block_steps(run)
    for _, step, size in block_rows:
        per_step[step] += size
    sizes = TrafficMatrix.objects.filter(run=run, step__gte=0).annotate(n=Length("sent") + Length("received"))
    for step, size in sizes.values_list("step", "n"):
        per_step[int(step)] += int(size or 0)
    per_step.pop(-1, None)  # events without a step are kept (few, and not ordered by step)
    keep_from = cut_step(per_step, used.total, int(budget * BUDGET_TARGET))
    if keep_from is None:
        return False
    for lo, hi in chunk_steps({s: b for s, b in per_step.items() if s < keep_from}, CHUNK_BYTES):
        if report.transactions:
            _let_others_write(report)
        t0 = time.monotonic()
        with transaction.atomic():  # oldest steps first: whole newest steps are left after each
            matrix_parts.lock(run)  # (no batch folds parts into a row this deletes)
            _delete_blocks(run, [b for b, step, _ in block_rows if lo <= step < hi], report)
            n = TrafficMatrix.objects.filter(run=run, step__gte=lo, step__lt=hi).delete()[1]
            MatrixPart.objects.filter(run=run, step__gte=lo, step__lt=hi).delete()  # (arrived since usage())
            report.matrices += int(n.get(TrafficMatrix._meta.label, 0))
            Run.objects.filter(pk=run.pk).update(pruned_below_step=hi)
            _note(run, f"steps below {hi} deleted at {now:%Y-%m-%d %H:%M}: the run exceeded its "
                       f"budget of {settings.FABRICMON_RUN_BUDGET_MB:g} MB (FABRICMON_RUN_BUDGET_MB)")
        report.last_took_s = time.monotonic() - t0
        report.transactions += 1
    report.runs_cut.append(run.name)
    return True


def refresh_usage(run: Run, now: datetime | None = None) -> Usage:
    """Store the run's disk usage on its row (what its page shows)."""
    used = usage(run)
    Run.objects.filter(pk=run.pk).update(stored_bytes=used.total, stored_at=now or timezone.now())
    return used


def prune(now: datetime | None = None) -> PruneReport:
    """One retention pass (see the module doc). Safe to run concurrently with ingest: each run's
    deletions are one transaction, and only rows older than the limits are touched."""
    now = now or timezone.now()
    report = PruneReport()
    touched: set[int] = set()
    _expire_events(now, report, touched)
    _expire_matrices(now, report, touched)
    # running runs, runs just pruned, and runs that ended (or were never measured) since last time
    live = Run.objects.filter(Q(state=Run.State.RUNNING) | Q(pk__in=touched) | Q(stored_at__isnull=True)
                              | Q(ended_at__gt=F("stored_at")))
    for run in live.distinct():
        _enforce_budget(run, now, report)
        refresh_usage(run, now)
        report.usage_refreshed += 1
    if report.blocks or report.matrices:
        _truncate_wal()
        log.info("retention: %s", report.line())
    return report


def _truncate_wal() -> None:
    """SQLite: fold the write-ahead log back into the database and cut it to zero. With readers
    always open (web, workers) the log is seldom reset by itself and kept its high-water size
    (363 MB after 35 minutes of the soak, beside an 866 MB database); what retention frees must
    not stay on disk in the log. Busy (a reader holding an old snapshot) means next pass."""
    if connection.vendor != "sqlite" or connection.in_atomic_block:  # never inside a transaction
        return
    try:
        with connection.cursor() as cur:
            cur.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            busy, _log_pages, _done = cur.fetchone()
    except OperationalError as exc:  # locked by a writer right now: next pass
        log.info("retention: the SQLite log was not truncated (%s); next pass", exc)
        return
    if busy:
        log.info("retention: the SQLite log was busy; it is truncated on a later pass")
