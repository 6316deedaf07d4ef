"""The Celery app: collectors (long-lived shard loops), alert evaluation and delivery, trace imports.

Queues (settings.py): the default ``celery`` queue (collectors and imports unless
FABRICMON_COLLECTOR_QUEUE / FABRICMON_IMPORT_QUEUE say otherwise, alert evaluation, retention) and
``delivery`` (CELERY_TASK_ROUTES: notifications), each with its own worker in `make demo` and
compose, so a slow receiver cannot starve evaluation or collection."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fabricmon.settings")

app = Celery("fabricmon")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
