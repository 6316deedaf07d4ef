"""The Celery app: collectors (long-lived shard loops), alert evaluation and delivery, trace imports.

Queues (settings.py, docs/deploy.md): ``collection`` (shard collectors, ensure_collectors),
``evaluation`` (alert evaluation, notification groups, cabling check, retention), ``imports``
(trace uploads) and ``delivery`` (notifications), each nameable by FABRICMON_*_QUEUE. A worker
without -Q consumes all but delivery; `make demo` runs one such worker and one for delivery, and
compose one service per queue, so a slow receiver cannot starve evaluation or collection and
collection scales out (``--scale worker=N``) on its own."""

import os
import secrets
import socket

from celery import Celery
from celery.signals import celeryd_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fabricmon.settings")

app = Celery("fabricmon")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@celeryd_init.connect
def _name_this_worker(**_kwargs: object) -> None:
    """One id per worker (its main process, before the pool forks: every pool child inherits it),
    put into each lease and standby token (telemetry/leases.py), so a shard's standby is kept out
    of its holder's worker — under `docker compose --scale` the workers can share a host name and
    pid numbers, hence the random part."""
    os.environ.setdefault("FABRICMON_WORKER_ID", f"{socket.gethostname()}-{secrets.token_hex(4)}")
