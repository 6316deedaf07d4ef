"""The Celery app: collectors (long-lived shard loops), alert evaluation and delivery, trace imports."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fabricmon.settings")

app = Celery("fabricmon")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
