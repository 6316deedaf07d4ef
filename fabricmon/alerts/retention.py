"""Alert history retention: resolved alerts, their state changes, closed episodes and finished
notifications older than ``FABRICMON_ALERTS_RETENTION_DAYS`` are deleted by the beat
(``alerts.prune_history``). Open alerts and episodes, and notifications still to send, are never
touched, however old: they are the present, not history.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from fabricmon.alerts.models import Alert, AlertTransition, Episode, Outbox


@dataclass
class HistoryReport:
    alerts: int = 0
    transitions: int = 0
    episodes: int = 0
    notifications: int = 0

    def line(self) -> str:
        return (f"pruned {self.alerts} alerts, {self.transitions} state changes, {self.episodes} episodes, "
                f"{self.notifications} notifications")


def _count(deleted: tuple[int, dict[str, int]], model: type) -> int:
    return int(deleted[1].get(model._meta.label, 0))


@transaction.atomic
def prune_history(now: datetime | None = None) -> HistoryReport:
    cutoff = (now or timezone.now()) - timedelta(days=settings.FABRICMON_ALERTS_RETENTION_DAYS)
    done = (Outbox.Status.SENT, Outbox.Status.FAILED)
    report = HistoryReport()
    finished = Outbox.objects.filter(status__in=done, created_at__lt=cutoff)
    report.notifications = _count(finished.delete(), Outbox)
    quiet = (Alert.State.RESOLVED, Alert.State.INACTIVE)
    old_changes = AlertTransition.objects.filter(at__lt=cutoff, alert__state__in=quiet)
    report.transitions = _count(old_changes.delete(), AlertTransition)
    old_alerts = Alert.objects.filter(state__in=quiet, last_true__lt=cutoff)
    gone = old_alerts.delete()
    report.alerts = _count(gone, Alert)
    report.transitions += _count(gone, AlertTransition)
    report.episodes = _count(Episode.objects.filter(closed_at__lt=cutoff).delete(), Episode)
    return report
