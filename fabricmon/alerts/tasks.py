"""Celery shells over the alerts app: evaluation, group flushes and delivery run on the beat, never
in a request.

The delivery tasks are routed to their own queue (``CELERY_TASK_ROUTES``: FABRICMON_DELIVERY_QUEUE)
with its own worker, so a receiver that answers slowly holds only delivery processes; group
flushes only write rows, and run on the main queue beside evaluation, so a slow receiver never
delays a group's timer."""

import logging

from celery import shared_task
from django.db import OperationalError

from fabricmon.alerts import cabling, delivery, evaluation, grouping, retention

log = logging.getLogger(__name__)


@shared_task(name="alerts.deliver_due", ignore_result=True, acks_late=True)
def deliver_due() -> int:
    """Send due outbox rows (beat: every few seconds; several run at once, one per delivery process,
    each claiming different rows). Retries are rows, not Celery retries: the schedule survives
    worker restarts and honours Retry-After. SQLite busy beside ingest for longer than its timeout
    is one warning line: the rows stay due and the next beat (seconds) sends them."""
    try:
        return delivery.deliver_due()
    except OperationalError as exc:
        log.warning("alerts: due notifications not sent (%s); the next beat tries again", exc)
        return 0


@shared_task(name="alerts.deliver", ignore_result=True, acks_late=True)
def deliver(outbox_id: int) -> str:
    """Send one row now if it is due (the claim makes a duplicate task harmless); SQLite busy: the
    row stays due and ``deliver_due`` sends it."""
    try:
        return delivery.deliver(outbox_id)
    except OperationalError as exc:
        log.warning("alerts: notification %s left for the next beat (%s)", outbox_id, exc)
        return "busy"


@shared_task(name="alerts.flush_groups", ignore_result=True)
def flush_groups() -> int:
    """Flush the notification groups whose group_wait / group_interval is over (beat: every
    FABRICMON_ALERTS_FLUSH_S) and hand each new notification to the delivery queue at once."""
    try:
        made = grouping.flush_due()
    except OperationalError as exc:  # SQLite busy beside ingest: the next beat (1 s) flushes them
        log.warning("alerts: notification groups not flushed (%s); the next beat tries again", exc)
        return 0
    for outbox_id in made:
        deliver.delay(outbox_id)
    return len(made)


@shared_task(name="alerts.evaluate", ignore_result=True)
def evaluate() -> int:
    """Run detection over the new frames of every fabric (beat: every second)."""
    return evaluation.evaluate_all()


@shared_task(name="alerts.prune_history", ignore_result=True)
def prune_history() -> str:
    """Alert history retention (beat: every FABRICMON_PRUNE_EVERY_S). SQLite busy past its timeout
    (ingest beside it): one warning; what is left over is pruned by the next pass."""
    try:
        return retention.prune_history().line()
    except OperationalError as exc:
        log.warning("alerts: history not pruned this pass (%s); the next pass goes on", exc)
        return "busy"


@shared_task(name="alerts.check_cabling", ignore_result=True)
def check_cabling() -> int:
    """Compare every fabric's LLDP neighbours with its topology (beat: every FABRICMON_CABLING_CHECK_S)."""
    return cabling.check_all()
