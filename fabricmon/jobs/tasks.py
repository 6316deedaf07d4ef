"""Celery tasks of the jobs app: trace imports queued by uploads (``imports.queue_import``) and
the storage retention pass on the beat (``retention.prune``)."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from fabricmon.base.busy import when_busy
from fabricmon.jobs import imports, retention


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
@when_busy("busy", "jobs: storage not pruned this pass; the next pass goes on")
def prune_storage() -> str:
    """Retention and run budgets (beat: every FABRICMON_PRUNE_EVERY_S). SQLite busy past its
    timeout beside ingest (the hour soak: twice in an hour): one warning, not a traceback; the
    deletes are idempotent, and the next pass takes up what this one left."""
    return retention.prune().line()
