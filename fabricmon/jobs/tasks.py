"""Celery tasks of the jobs app: trace imports queued by uploads (``imports.queue_import``)."""

from __future__ import annotations

from celery import shared_task

from fabricmon.jobs import imports


@shared_task(name="jobs.import_upload", acks_late=True)
def import_upload(upload_id: int) -> str:
    """Import one saved upload; its row carries progress and the outcome (a format error is an
    outcome — state failed — not a task failure)."""
    upload = imports.import_queued(upload_id)
    return upload.state if upload is not None else "skipped"
