"""Celery shells over ``services``: shard collectors and the beat job that keeps them running."""

from __future__ import annotations

import redis
from celery import shared_task
from celery.signals import worker_process_init
from django.conf import settings

from fabricmon.telemetry import event_loop, services


@worker_process_init.connect
def _fresh_loop_per_process(**_kwargs: object) -> None:
    # A forked pool child must build its own event loop and SNMP engine (lazily, on first lease).
    event_loop.reset_after_fork()


@shared_task(
    name="telemetry.collect_shard",
    ignore_result=True,
    # Not acks_late: if the worker dies, the lease expires and beat re-enqueues the shard within
    # one lease — redelivering the old message an hour later (visibility timeout) would only race.
    acks_late=False,
    # Redis briefly unreachable at lease start: retry soon, a few times, then let beat take over.
    autoretry_for=(redis.ConnectionError, redis.TimeoutError),
    retry_backoff=1,
    retry_backoff_max=10,
    max_retries=3,
)
def collect_shard(shard_id: str) -> str:
    """Collect one shard for one lease (FABRICMON_LEASE_S), then hand it back and queue the next lease."""
    services.shard_started(shard_id)
    report = services.run_shard(shard_id, lease_s=settings.FABRICMON_LEASE_S)
    if report.ended == "lease_end":
        # Queue the next lease at once (any worker may take it); beat would, but only seconds later.
        _enqueue(shard_id)
    return report.ended


@shared_task(name="telemetry.ensure_collectors", ignore_result=True)
def ensure_collectors() -> list[str]:
    """Beat job: enqueue a collector for every shard nobody holds (new, finished, or its worker died)."""
    return services.ensure_collectors(_enqueue)


def _enqueue(shard_id: str) -> None:
    collect_shard.apply_async(
        (shard_id,), queue=settings.FABRICMON_COLLECTOR_QUEUE, expires=settings.FABRICMON_LEASE_S
    )
