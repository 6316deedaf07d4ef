"""Delivery of the outbox: claim a due row, send it through its receiver's transport, and record
the outcome — sent, retried with backoff (or the receiver's Retry-After), or failed for good.

Retries are rows, not Celery retries: the schedule survives worker restarts. A row left in
"sending" by a worker that died is handed back after ``STUCK_S``.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from fabricmon.alerts.models import (
    AllowedHost,
    Outbox,
    Receiver,
)
from fabricmon.alerts.netguard import Policy
from fabricmon.alerts.services import log
from fabricmon.alerts.transports import Message, Target, TransportError, transport_for
from fabricmon.base.sealed import SecretUnreadableError, reveal

BACKOFF_BASE_S = 5.0
BACKOFF_MAX_S = 300.0
# Give up on a notification this old (a receiver down for a day gets a fresh alert later).
MAX_AGE_S = 24 * 3600.0
# A row left in "sending" this long belongs to a worker that died: hand it back.
STUCK_S = 120.0


def policy() -> Policy:
    """The SSRF guard's exceptions: settings (FABRICMON_ALERTS_ALLOW_HOSTS) plus admin rows."""
    allow = list(getattr(settings, "FABRICMON_ALERTS_ALLOW_HOSTS", []))
    allow += list(AllowedHost.objects.values_list("host", flat=True))
    return Policy(tuple(allow))


def claim(outbox_id: int, now: datetime) -> bool:
    """Compare-and-swap: exactly one caller moves a due row from pending to sending."""
    return (
        Outbox.objects.filter(id=outbox_id, status=Outbox.Status.PENDING, next_attempt_at__lte=now).update(
            status=Outbox.Status.SENDING, claimed_at=now, attempts=F("attempts") + 1
        )
        == 1
    )


def backoff_s(attempts: int) -> float:
    return min(BACKOFF_BASE_S * 2 ** max(attempts - 1, 0), BACKOFF_MAX_S)


def deliver(outbox_id: int, now: datetime | None = None) -> str:
    """Send one outbox row if due and unclaimed. Returns its status afterwards ('' if not claimed)."""
    now = now or timezone.now()
    if not claim(outbox_id, now):
        return ""
    row = Outbox.objects.select_related("receiver").get(id=outbox_id)
    rcv = row.receiver
    if rcv.disabled:
        Outbox.objects.filter(id=row.id).update(status=Outbox.Status.FAILED, last_error="receiver disabled")
        return Outbox.Status.FAILED
    try:
        transport_for(rcv.kind, target(rcv), policy()).notify(Message(**row.payload))
    except TransportError as exc:
        return _failed(row, rcv, exc, now)
    Outbox.objects.filter(id=row.id).update(status=Outbox.Status.SENT, sent_at=now, last_error="")
    if rcv.last_error:
        Receiver.objects.filter(id=rcv.id).update(last_error="")
    return Outbox.Status.SENT


def target(rcv: Receiver) -> Target:
    """The receiver's URL and secret, decrypted here and only here (they are credentials)."""
    try:
        return Target(rcv.name, reveal(rcv.url), reveal(rcv.secret))
    except SecretUnreadableError as exc:  # no retry brings a dropped key back: fail, and say why
        raise TransportError(f"{rcv.name}: {exc}", permanent=True) from None


def _failed(row: Outbox, rcv: Receiver, exc: TransportError, now: datetime) -> str:
    log.info("delivery %s to receiver %s failed: %s", row.id, rcv.pk, exc.message)
    if exc.permanent:
        Outbox.objects.filter(id=row.id).update(status=Outbox.Status.FAILED, last_error=exc.message)
        Receiver.objects.filter(id=rcv.id).update(disabled=True, last_error=exc.message)
        return Outbox.Status.FAILED
    if (now - row.created_at).total_seconds() > MAX_AGE_S:
        Outbox.objects.filter(id=row.id).update(
            status=Outbox.Status.FAILED, last_error=f"gave up: {exc.message}"
        )
        return Outbox.Status.FAILED
    wait = max(backoff_s(row.attempts), exc.retry_after_s or 0.0)
    Outbox.objects.filter(id=row.id).update(
        status=Outbox.Status.PENDING, next_attempt_at=now + timedelta(seconds=wait), last_error=exc.message
    )
    Receiver.objects.filter(id=rcv.id).update(last_error=exc.message)
    return Outbox.Status.PENDING


def deliver_due(now: datetime | None = None, limit: int = 100) -> int:
    """Hand back rows of dead workers, then send every due row. Returns how many were sent."""
    now = now or timezone.now()
    Outbox.objects.filter(
        status=Outbox.Status.SENDING, claimed_at__lt=now - timedelta(seconds=STUCK_S)
    ).update(status=Outbox.Status.PENDING)
    ids = list(
        Outbox.objects.filter(status=Outbox.Status.PENDING, next_attempt_at__lte=now)
        .order_by("next_attempt_at")
        .values_list("id", flat=True)[:limit]
    )
    return sum(deliver(i, now) == Outbox.Status.SENT for i in ids)


def send_test(receiver: Receiver, now: datetime | None = None) -> str:
    """The "send test" button: one real delivery right now. Returns '' or the error shown."""
    now = now or timezone.now()
    msg = Message(
        id=f"test_{receiver.pk}_{int(now.timestamp())}",
        fingerprint="test",
        fabric=receiver.fabric or "*",
        kind="test",
        key="test message",
        status="test",
        summary="fabricmon test notification",
        starts_at=now.isoformat(),
    )
    row = Outbox.objects.create(
        receiver=receiver, payload=dataclasses.asdict(msg), created_at=now, next_attempt_at=now
    )
    if receiver.disabled:  # a test is how an operator checks a fixed receiver: try it anyway
        Receiver.objects.filter(id=receiver.id).update(disabled=False)
    status = deliver(row.id, now)
    Outbox.objects.filter(id=row.id, status=Outbox.Status.PENDING).update(status=Outbox.Status.FAILED)
    return "" if status == Outbox.Status.SENT else Outbox.objects.get(id=row.id).last_error
