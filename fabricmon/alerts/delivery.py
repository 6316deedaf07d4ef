"""Delivery of the outbox: claim a due row under a lease, send it through its receiver's transport
within one deadline, and record the outcome — sent, retried with backoff (exponential, capped,
full jitter; or the receiver's Retry-After), or failed for good with the reason on the row and on
the receiver's page. A row is one flush of one notification group (``grouping``).

::

    pending ──claim (conditional UPDATE: attempts+1, lease)──▶ sending ──2xx──────────────▶ sent
      ▲ ▲                                                       │ │ │
      │ └──────────── retryable, attempts left (backoff) ───────┘ │ └─ permanent / out of ─▶ failed
      └────────────── lease expired (its worker died) ────────────┘      attempts

Retries are rows, not Celery retries: the schedule survives worker restarts. The lease
(``claimed_until``) is longer than a delivery can take (its deadline bounds DNS, connect, TLS,
sending and every read), so a row in flight is never handed out again; only a row whose worker
died is, once its lease is over. Each outcome is written only by the claim that made it (the
attempt number is the fence), so a late writer can never overwrite a newer claim.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import F, Q
from django.utils import timezone

from fabricmon.alerts import timing
from fabricmon.alerts.models import (
    AllowedHost,
    Outbox,
    Receiver,
)
from fabricmon.alerts.netguard import Policy
from fabricmon.alerts.services import log
from fabricmon.alerts.transports import Message, Notification, Target, TransportError, transport_for
from fabricmon.base.sealed import SecretUnreadableError, reveal

# Retry n waits uniformly in [0, min(BACKOFF_MAX_S, BACKOFF_BASE_S · 2^(n−1))] (timing.retry_delay_s).
BACKOFF_BASE_S = 5.0
BACKOFF_MAX_S = 300.0
# Where the jitter comes from: a number in [0, 1). Tests put a seeded or fixed one here.
jitter: Callable[[], float] = random.random
# A receiver's Retry-After is honoured up to this (a huge one would park the row past MAX_AGE_S).
RETRY_AFTER_MAX_S = 3600.0
# Give up on a notification this old (a receiver down for a day gets a fresh alert later).
MAX_AGE_S = 24 * 3600.0
# The lease is the delivery deadline plus this: room for the database writes around the request
# (SQLite may wait up to 20 s for its write lock).
LEASE_MARGIN_S = 60.0
# One deliver_due run starts no new delivery after this long: the next beat tick goes on.
PASS_BUDGET_S = 30.0


def policy() -> Policy:
    """The SSRF guard's exceptions (FABRICMON_ALERTS_ALLOW_HOSTS plus admin rows), the delivery
    deadline and the response cap."""
    allow = list(settings.FABRICMON_ALERTS_ALLOW_HOSTS)
    allow += list(AllowedHost.objects.values_list("host", flat=True))
    return Policy(
        tuple(allow),
        deadline_s=float(settings.FABRICMON_ALERTS_DELIVERY_DEADLINE_S),
        max_response_bytes=int(settings.FABRICMON_ALERTS_MAX_RESPONSE_KB) * 1024,
    )


def lease_s() -> float:
    return float(settings.FABRICMON_ALERTS_DELIVERY_DEADLINE_S) + LEASE_MARGIN_S


def max_attempts() -> int:
    return max(1, int(settings.FABRICMON_ALERTS_MAX_ATTEMPTS))


def claim(outbox_id: int, now: datetime) -> int:
    """Compare-and-swap: exactly one caller moves a due row from pending to sending, taking the
    lease. Returns the attempt number it claimed (the fence for its outcome), 0 if it got nothing."""
    took = Outbox.objects.filter(id=outbox_id, status=Outbox.Status.PENDING, next_attempt_at__lte=now).update(
        status=Outbox.Status.SENDING,
        claimed_at=now,
        claimed_until=now + timedelta(seconds=lease_s()),
        attempts=F("attempts") + 1,
    )
    if took != 1:
        return 0
    # The row is ours until the lease ends: nobody else changes attempts meanwhile.
    return int(Outbox.objects.values_list("attempts", flat=True).get(id=outbox_id))


def _finish(outbox_id: int, attempt: int, **fields: object) -> bool:
    """Record an outcome, if the claim that made it is still the row's claim."""
    done = Outbox.objects.filter(id=outbox_id, status=Outbox.Status.SENDING, attempts=attempt).update(
        claimed_until=None, **fields
    )
    if done != 1:
        log.warning("delivery %s: attempt %s ended after its lease; outcome not recorded", outbox_id, attempt)
    return done == 1


def backoff_s(attempts: int) -> float:
    """How long the row waits after its attempt number ``attempts`` failed."""
    return timing.retry_delay_s(attempts, BACKOFF_BASE_S, BACKOFF_MAX_S, jitter)


def deliver(outbox_id: int, now: datetime | None = None) -> str:
    """Send one outbox row if due and unclaimed. Returns its status afterwards ('' if not claimed)."""
    now = now or timezone.now()
    attempt = claim(outbox_id, now)
    if not attempt:
        return ""
    row = Outbox.objects.select_related("receiver").get(id=outbox_id)
    rcv = row.receiver
    if rcv.disabled:
        _finish(row.id, attempt, status=Outbox.Status.FAILED, last_error="receiver disabled")
        return Outbox.Status.FAILED
    try:
        transport_for(rcv.kind, target(rcv), policy()).notify(Notification.from_json(row.payload))
    except TransportError as exc:
        return _failed(row, attempt, rcv, exc, now)
    except ValueError as exc:  # transport_for: a receiver kind this version does not know
        return _failed(row, attempt, rcv, TransportError(f"{rcv.name}: {exc}", permanent=True), now)
    except Exception as exc:  # a bug or a malformed row: fail the row, never leave it "sending"
        log.exception("delivery %s to receiver %s: internal error", row.id, rcv.pk)
        reason = f"internal error ({type(exc).__name__}); see the worker log"
        _finish(row.id, attempt, status=Outbox.Status.FAILED, last_error=reason)
        return Outbox.Status.FAILED
    _finish(row.id, attempt, status=Outbox.Status.SENT, sent_at=now, last_error="")
    if rcv.last_error:
        Receiver.objects.filter(id=rcv.id).update(last_error="")
    return Outbox.Status.SENT


def target(rcv: Receiver) -> Target:
    """The receiver's URL and secret, decrypted here and only here (they are credentials)."""
    try:
        return Target(rcv.name, reveal(rcv.url), reveal(rcv.secret))
    except SecretUnreadableError as exc:  # no retry brings a dropped key back: fail, and say why
        raise TransportError(f"{rcv.name}: {exc}", permanent=True) from None


def _failed(row: Outbox, attempt: int, rcv: Receiver, exc: TransportError, now: datetime) -> str:
    log.info("delivery %s to receiver %s failed (attempt %s): %s", row.id, rcv.pk, attempt, exc.message)
    if exc.permanent:
        _finish(row.id, attempt, status=Outbox.Status.FAILED, last_error=exc.message)
        Receiver.objects.filter(id=rcv.id).update(disabled=True, last_error=exc.message)
        return Outbox.Status.FAILED
    too_old = (now - row.created_at).total_seconds() > MAX_AGE_S
    if attempt >= max_attempts() or too_old:
        reason = f"gave up after {attempt} attempts: {exc.message}"
        _finish(row.id, attempt, status=Outbox.Status.FAILED, last_error=reason)
        Receiver.objects.filter(id=rcv.id).update(last_error=f"a notification failed: {reason}")
        return Outbox.Status.FAILED
    wait = max(backoff_s(attempt), min(exc.retry_after_s or 0.0, RETRY_AFTER_MAX_S))
    _finish(
        row.id,
        attempt,
        status=Outbox.Status.PENDING,
        next_attempt_at=now + timedelta(seconds=wait),
        last_error=exc.message,
    )
    Receiver.objects.filter(id=rcv.id).update(
        last_error=f"retrying (attempt {attempt} of {max_attempts()}): {exc.message}"
    )
    return Outbox.Status.PENDING


def hand_back_expired(now: datetime) -> int:
    """Rows whose claimer died (lease over) are due again, or failed if out of attempts."""
    old_claim = now - timedelta(seconds=lease_s())
    lease = Q(claimed_until__lt=now) | Q(claimed_until=None, claimed_at__lt=old_claim)
    expired = Outbox.objects.filter(lease, status=Outbox.Status.SENDING)
    spent = expired.filter(attempts__gte=max_attempts()).update(
        status=Outbox.Status.FAILED,
        claimed_until=None,
        last_error="gave up: the worker sending it stopped (lease expired) on its last attempt",
    )
    return spent + expired.update(status=Outbox.Status.PENDING, claimed_until=None, next_attempt_at=now)


def deliver_due(now: datetime | None = None, limit: int = 100) -> int:
    """Hand back rows of dead workers, then send due rows, oldest first, for at most
    ``PASS_BUDGET_S``; a receiver that failed in this pass is not tried again in it, so one slow
    receiver costs a pass one deadline, not one per row. Returns how many were sent."""
    now = now or timezone.now()
    hand_back_expired(now)
    due = list(
        Outbox.objects.filter(status=Outbox.Status.PENDING, next_attempt_at__lte=now)
        .order_by("next_attempt_at", "id")
        .values_list("id", "receiver_id")[:limit]
    )
    started = time.monotonic()
    failing: set[int] = set()
    sent = 0
    for outbox_id, receiver_id in due:
        if receiver_id in failing:
            continue
        if time.monotonic() - started > PASS_BUDGET_S:
            break
        status = deliver(outbox_id, now)
        sent += status == Outbox.Status.SENT
        if status in (Outbox.Status.PENDING, Outbox.Status.FAILED):
            failing.add(receiver_id)
    return sent


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
    note = Notification.of(msg.id, receiver.name, [msg], {"alertname": "test"}, '{}:{alertname="test"}')
    row = Outbox.objects.create(
        receiver=receiver, payload=note.as_json(), created_at=now, next_attempt_at=now
    )
    if receiver.disabled:  # a test is how an operator checks a fixed receiver: try it anyway
        Receiver.objects.filter(id=receiver.id).update(disabled=False)
    status = deliver(row.id, now)
    Outbox.objects.filter(id=row.id, status=Outbox.Status.PENDING).update(status=Outbox.Status.FAILED)
    return "" if status == Outbox.Status.SENT else Outbox.objects.get(id=row.id).last_error
