"""Celery shells over ``services``: delivery runs on the beat, never inside a request."""

from celery import shared_task

from fabricmon.alerts import services


@shared_task(name="alerts.deliver_due", ignore_result=True, acks_late=True)
def deliver_due() -> int:
    """Send every due outbox row (beat: every few seconds). Retries are rows, not Celery retries:
    the schedule survives worker restarts and honours Retry-After."""
    return services.deliver_due()


@shared_task(name="alerts.deliver", ignore_result=True, acks_late=True)
def deliver(outbox_id: int) -> str:
    """Send one row now if it is due (the claim makes a duplicate task harmless)."""
    return services.deliver(outbox_id)


@shared_task(name="alerts.evaluate", ignore_result=True)
def evaluate() -> int:
    """Run detection over the new frames of every fabric (beat: every second)."""
    from fabricmon.alerts.evaluation import evaluate_fabric  # noqa: PLC0415 (imports models lazily)
    from fabricmon.topology.models import Fabric  # noqa: PLC0415

    return sum(evaluate_fabric(name) for name in Fabric.objects.values_list("name", flat=True))
