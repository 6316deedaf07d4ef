"""Celery shells over the alerts app: evaluation, group flushes and delivery run on the beat, never
in a request.

The delivery tasks are routed to their own queue (``CELERY_TASK_ROUTES``: FABRICMON_DELIVERY_QUEUE)
with its own worker, so a receiver that answers slowly holds only delivery processes; group
flushes only write rows, and run on the main queue beside evaluation, so a slow receiver never
delays a group's timer."""

from celery import shared_task

from fabricmon.alerts import cabling, delivery, evaluation, grouping, retention
from fabricmon.base.busy import when_busy


@shared_task(name="alerts.deliver_due", ignore_result=True, acks_late=True)
@when_busy(0, "alerts: due notifications not sent; the next beat tries again")
def deliver_due() -> int:
    """Send due outbox rows (beat: every few seconds; several run at once, one per delivery process,
    each claiming different rows). Retries are rows, not Celery retries: the schedule survives
    worker restarts and honours Retry-After. SQLite busy beside ingest for longer than its timeout
    is one warning line: the rows stay due and the next beat (seconds) sends them."""
    return delivery.deliver_due()


@shared_task(name="alerts.deliver", ignore_result=True, acks_late=True)
@when_busy("busy", "alerts: notification {0} left for the next beat")
def deliver(outbox_id: int) -> str:
    """Send one row now if it is due (the claim makes a duplicate task harmless); SQLite busy: the
    row stays due and ``deliver_due`` sends it."""
    return delivery.deliver(outbox_id)


@shared_task(name="alerts.flush_groups", ignore_result=True)
@when_busy(0, "alerts: notification groups not flushed; the next beat tries again")
def flush_groups() -> int:
    """Flush the notification groups whose group_wait / group_interval is over (beat: every
    FABRICMON_ALERTS_FLUSH_S) and hand each new notification to the delivery queue at once."""
    made = grouping.flush_due()
    for outbox_id in made:
        deliver.delay(outbox_id)
    return len(made)


@shared_task(name="alerts.evaluate", ignore_result=True)
def evaluate() -> int:
    """Run detection over the new frames of every fabric (beat: every second)."""
    return evaluation.evaluate_all()


@shared_task(name="alerts.prune_history", ignore_result=True)
@when_busy("busy", "alerts: history not pruned this pass; the next pass goes on")
def prune_history() -> str:
    """Alert history retention (beat: every FABRICMON_PRUNE_EVERY_S). SQLite busy past its timeout
    (ingest beside it): one warning; what is left over is pruned by the next pass."""
    return retention.prune_history().line()


@shared_task(name="alerts.check_cabling", ignore_result=True)
def check_cabling() -> int:
    """Compare every fabric's LLDP neighbours with its topology (beat: every FABRICMON_CABLING_CHECK_S)."""
    return cabling.check_all()
