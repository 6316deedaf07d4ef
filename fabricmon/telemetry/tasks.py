"""Celery shells over ``services``: shard collectors and the beat job that keeps them running.

A ``collect_shard`` task lives as long as its worker: it holds its shard (or stands by for it) and
goes back to the shard when its lease or standby slot is lost (a Redis restart, a stall). On a
warm shutdown the worker's pool children get SIGTERM from the main process, which sets
``SHUTDOWN``: holders hand their shards back at once, so the standby takes over without waiting out
a lease.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from pathlib import Path

from celery import shared_task
from celery.signals import worker_process_init, worker_shutting_down
from django.conf import settings

from fabricmon.telemetry import event_loop, services

log = logging.getLogger(__name__)


@worker_process_init.connect
def _fresh_loop_per_process(**_kwargs: object) -> None:
    # A forked pool child must build its own event loop and SNMP engine (lazily, on first lease).
    event_loop.reset_after_fork()


def _child_sigterm(signum: int, _frame: object) -> None:
    """Let the collector hand its lease back (≤ one supervisor wake-up) and its task return, so
    the child ends as a finished task, not a lost one (billiard's handler, which this replaces
    while a collector runs, exited mid-task: a WorkerLostError traceback per child on every warm
    shutdown). A second SIGTERM changes nothing; the alarm bounds the wait."""
    if services.SHUTDOWN.is_set():
        return
    services.SHUTDOWN.set()
    # SIGALRM's default action ends the process should the task not return. 8 s: a holder hands
    # back at a tick boundary (≤ 1.2 s) and then closes its gNMI sessions; at 2 s the demo's
    # shutdown still lost one collector a time (the supervisor kills what is left after 10 s)
    signal.alarm(8)


@worker_shutting_down.connect
def _tell_pool_children(**_kwargs: object) -> None:
    """Warm shutdown waits for running tasks, and collectors never finish on their own: pass the
    shutdown to every pool child (Linux: the main process's children from /proc)."""
    for children in Path("/proc/self/task").glob("*/children"):
        for pid in children.read_text().split():
            try:
                os.kill(int(pid), signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                continue


@shared_task(
    name="telemetry.collect_shard",
    ignore_result=True,
    # Not acks_late: if the worker dies its standby takes the shard over and beat queues a new
    # standby — redelivering the old message an hour later (visibility timeout) would only race.
    acks_late=False,
)
def collect_shard(shard_id: str) -> str:
    """Hold shard ``shard_id`` or stand by for it, for as long as this worker lives."""
    services.shard_started(shard_id)
    # billiard puts its own SIGTERM handler (exit at once) in place after worker_process_init, so
    # ours goes in here, for as long as the collector runs, and the pool's afterwards
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _child_sigterm) if main else None
    try:
        return services.keep_collecting(shard_id)
    finally:
        if main:
            signal.alarm(0)
            signal.signal(signal.SIGTERM, previous)


@shared_task(name="telemetry.ensure_collectors", ignore_result=True)
def ensure_collectors() -> list[str]:
    """Beat job: enqueue a collector for every shard without a holder or a standby (or with a
    standby in its holder's worker: at most every third beat)."""
    return services.ensure_collectors(_enqueue, placement_s=3 * settings.FABRICMON_ENSURE_COLLECTORS_S)


def _enqueue(shard_id: str) -> None:
    # A queued collector nobody started within a few beats is superseded by the next beat's.
    expires = max(10.0, 3 * settings.FABRICMON_ENSURE_COLLECTORS_S)
    collect_shard.apply_async((shard_id,), queue=settings.FABRICMON_COLLECTOR_QUEUE, expires=expires)
