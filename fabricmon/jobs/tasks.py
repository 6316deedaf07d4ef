"""Celery tasks of the jobs app: trace imports queued by uploads (``imports.queue_import``) and
the storage retention pass on the beat (``retention.prune``)."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings
from django.db import OperationalError

from fabricmon.jobs import imports, retention

log = logging.getLogger(__name__)


@shared_task(name="jobs.import_upload", acks_late=True)
def import_upload(upload_id: int) -> str:
    """Import one saved upload; its row carries progress and the outcome (a format error is an
    outcome — state failed — not a task failure)."""
    upload = imports.import_queued(upload_id)
    return upload.state if upload is not None else "skipped"


def enqueue_import(upload_id: int) -> None:
    """Queue ``import_upload`` for a saved upload (what ``imports.queue_import`` is given)."""
    import_upload.apply_async((upload_id,), queue=settings.FABRICMON_IMPORT_QUEUE)


@shared_task(name="jobs.prune_storage", ignore_result=True)
def prune_storage() -> str:
    """Retention and run budgets (beat: every FABRICMON_PRUNE_EVERY_S). SQLite busy past its
    timeout beside ingest (the hour soak: twice in an hour): one warning, not a traceback; the
    deletes are idempotent, and the next pass takes up what this one left."""
    try:
        return retention.prune().line()
    except OperationalError as exc:
        log.warning("jobs: storage not pruned this pass (%s); the next pass goes on", exc)
        return "busy"
