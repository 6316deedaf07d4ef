"""Notification groups — Alertmanager's dispatcher over rows: an alert that fires joins its
receiver's group (the values of the receiver's ``group_by`` labels), and a group's flushes, timed
by ``timing`` (group_wait, group_interval, repeat_interval), become outbox rows carrying every
alert of the group.

::

    services._enqueue ──admit(receiver, message)──▶ NotificationGroup ──< GroupMember
                                                         │ next_flush_at due
    beat: alerts.flush_groups ──flush_due──────────────▶ timing.flush ──▶ Outbox row (one per flush)
                                                                           └─▶ delivery (its queue)

Rules kept from Alertmanager (docs/alerts.md says where fabricmon departs):

- A group flushes one notification at a time: while its last one is still being delivered
  (pending retry or in flight), its next flush waits, then carries the group's state as it is.
- Only the groups that were told an alert fires hear of its resolution; a firing member whose
  alert is no longer firing (its resolution fell under a silence, or the alert row was deleted)
  counts as resolved at the next flush — so no group repeats a gone alert for ever.
- A group without alerts stops ticking; it is kept (with its notification log) for
  ``FABRICMON_ALERTS_GROUP_RETENTION_S`` and then deleted: state follows the open alerts.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, OuterRef
from django.utils import timezone

from fabricmon.alerts import timing
from fabricmon.alerts.models import Alert, GroupMember, NotificationGroup, Outbox, Receiver
from fabricmon.alerts.transports import Message, Notification
from fabricmon.alerts.transports.alertmanager import RESEND_S

# An Alertmanager groups and times alerts itself: one group per receiver, posted as soon as an alert
# fires or resolves (every flush pass) and re-posted every RESEND_S (transports/alertmanager.py).
ALERTMANAGER_TIMING = timing.GroupTiming(group_by=(), group_wait_s=0.0, group_interval_s=0.0,
                                         repeat_interval_s=RESEND_S)


def timing_of(rcv: Receiver) -> timing.GroupTiming:
    if rcv.kind == Receiver.Kind.ALERTMANAGER:
        return dataclasses.replace(ALERTMANAGER_TIMING, send_resolved=rcv.send_resolved)
    return timing.GroupTiming(tuple(rcv.group_by or ()), rcv.group_wait_s, rcv.group_interval_s,
                              rcv.repeat_interval_s, rcv.send_resolved)


def _s(dt: datetime | None) -> float | None:
    return None if dt is None else dt.timestamp()


def _dt(s: float | None) -> datetime | None:
    return None if s is None else datetime.fromtimestamp(s, UTC)


def state_of(group: NotificationGroup) -> timing.GroupState:
    return timing.GroupState(_s(group.next_flush_at), _s(group.notified_at),
                             frozenset(group.notified_firing), frozenset(group.notified_resolved))


@transaction.atomic
def admit(rcv: Receiver, msg: Message, now: datetime) -> None:
    """One alert fired or resolved (and no silence covers it) for this receiver."""
    mine = GroupMember.objects.filter(group__receiver=rcv, fingerprint=msg.fingerprint)
    if msg.status != "firing":
        groups = list(NotificationGroup.objects.select_for_update().filter(members__in=mine))
        GroupMember.objects.filter(group__in=groups, fingerprint=msg.fingerprint).update(
            firing=False, message=dataclasses.asdict(msg), changed_at=now)
        return  # a group that never heard of the alert is not told it resolved
    tm = timing_of(rcv)
    labels = timing.group_labels(msg.labels(), tm.group_by)
    NotificationGroup.objects.get_or_create(receiver=rcv, key=timing.group_id(labels),
                                            defaults={"labels": labels, "created_at": now})
    group = NotificationGroup.objects.select_for_update().get(receiver=rcv, key=timing.group_id(labels))
    mine.exclude(group=group).delete()  # the receiver's group_by changed: the alert moves groups
    GroupMember.objects.update_or_create(
        group=group, fingerprint=msg.fingerprint,
        defaults={"firing": True, "message": dataclasses.asdict(msg), "changed_at": now})
    armed = timing.admit(state_of(group), now.timestamp(), tm)
    if armed.next_flush_s != _s(group.next_flush_at):
        NotificationGroup.objects.filter(pk=group.pk).update(next_flush_at=_dt(armed.next_flush_s),
                                                             emptied_at=None)


def flush_due(now: datetime | None = None, limit: int = 500) -> list[int]:
    """Flush every group whose timer is due (oldest first), except those of disabled receivers and
    those with a notification still being delivered; drop groups empty for longer than the
    retention. Returns the new outbox rows' ids (the task hands them to the delivery queue)."""
    now = now or timezone.now()
    unfinished = (Outbox.Status.PENDING, Outbox.Status.SENDING)
    busy = Outbox.objects.filter(group=OuterRef("pk"), status__in=unfinished)
    due = (NotificationGroup.objects.filter(next_flush_at__lte=now, receiver__disabled=False)
           .filter(~Exists(busy)).order_by("next_flush_at", "pk").values_list("pk", flat=True)[:limit])
    made = [row for pk in list(due) if (row := _flush_one(pk, now))]
    retention = timedelta(seconds=float(settings.FABRICMON_ALERTS_GROUP_RETENTION_S))
    NotificationGroup.objects.filter(next_flush_at=None, emptied_at__lt=now - retention).delete()
    return made


@transaction.atomic
def _flush_one(pk: int, now: datetime) -> int | None:
    group = (NotificationGroup.objects.select_for_update().select_related("receiver")
             .filter(pk=pk, next_flush_at__lte=now).first())
    if group is None:
        return None
    # The tick number is the fence: of two flushers of one group (SQLite has no row locks), one.
    tick = group.flushes + 1
    if not NotificationGroup.objects.filter(pk=pk, flushes=group.flushes).update(flushes=F("flushes") + 1):
        return None
    rcv = group.receiver
    members = {m.fingerprint: m for m in group.members.all()}
    _resolve_gone(members, now)
    firing = frozenset(fp for fp, m in members.items() if m.firing)
    done = timing.flush(state_of(group), firing, frozenset(members) - firing, now.timestamp(), timing_of(rcv))
    row_id = None
    if done.send:
        note = Notification.of(
            f"grp_{group.pk}_{tick}", rcv.name, [Message(**members[fp].message) for fp in done.send],
            group.labels, timing.group_key(group.labels))
        row_id = Outbox.objects.create(group=group, receiver=rcv, payload=note.as_json(), created_at=now,
                                       next_attempt_at=now).pk
    GroupMember.objects.filter(group=group, fingerprint__in=done.drop).delete()
    after = done.state
    NotificationGroup.objects.filter(pk=pk).update(
        next_flush_at=_dt(after.next_flush_s), notified_at=_dt(after.notified_s),
        notified_firing=sorted(after.notified_firing), notified_resolved=sorted(after.notified_resolved),
        emptied_at=now if after.next_flush_s is None else None)
    return row_id


def _resolve_gone(members: dict[str, GroupMember], now: datetime) -> None:
    """Firing members whose alert no longer fires become resolved (their ends_at: the alert's
    resolution, else now)."""
    firing = [fp for fp, m in members.items() if m.firing]
    alive = dict(Alert.objects.filter(fingerprint__in=firing).values_list("fingerprint", "state"))
    for fp in firing:
        if alive.get(fp) == Alert.State.FIRING:
            continue
        ended = Alert.objects.filter(fingerprint=fp).values_list("resolved_at", flat=True).first() or now
        m = members[fp]
        m.firing = False
        m.message = {**m.message, "status": "resolved", "ends_at": ended.isoformat()}
