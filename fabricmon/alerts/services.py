"""The verbs of alerting: evaluate a window, store state changes, enqueue and deliver.

Pipeline (Alertmanager's stages, as functions):

    record_window ─ conditions → lifecycle (for / keep_firing, dedup by fingerprint)
                  → AlertTransition rows → episode grouping + trajectory
                  → silence stage → Outbox rows (one per receiver)
    deliver_due   ─ claim (conditional UPDATE) → transport → sent | retry with backoff /
                    Retry-After | permanent failure (receiver disabled, error shown)

Every function takes ``now`` so tests drive a controllable clock.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from fabricmon.alerts.culprit import attribute_ports
from fabricmon.alerts.models import (
    Alert,
    AlertTransition,
    AllowedHost,
    Episode,
    Outbox,
    Receiver,
    Rule,
    Silence,
)
from fabricmon.alerts.netguard import Policy
from fabricmon.alerts.transports import Message, Target, TransportError, transport_for
from fabricmon.core.detection.conditions import Condition, conditions, trajectory_step
from fabricmon.core.detection.config import DetectConfig
from fabricmon.core.detection.geometry import FabricGeometry
from fabricmon.core.detection.lifecycle import DEFAULT_LIFECYCLE, LifecycleConfig, Slot, advance
from fabricmon.core.detection.window import WindowFindings

log = logging.getLogger(__name__)

BACKOFF_BASE_S = 5.0
BACKOFF_MAX_S = 300.0
# Give up on a notification this old (a receiver down for a day gets a fresh alert later).
MAX_AGE_S = 24 * 3600.0
# A row left in "sending" this long belongs to a worker that died: hand it back.
STUCK_S = 120.0


def _ns(dt: datetime) -> int:
    return int(dt.timestamp() * 1e9)


def policy() -> Policy:
    """The SSRF guard's exceptions: settings (FABRICMON_ALERTS_ALLOW_HOSTS) plus admin rows."""
    allow = list(getattr(settings, "FABRICMON_ALERTS_ALLOW_HOSTS", []))
    allow += list(AllowedHost.objects.values_list("host", flat=True))
    return Policy(tuple(allow))


def detect_config(fabric: str) -> DetectConfig:
    """Per-fabric thresholds: the defaults overridden by every enabled rule's ``params``."""
    merged: dict[str, Any] = {}
    for params in Rule.objects.filter(fabric=fabric, enabled=True).values_list("params", flat=True):
        merged.update(params or {})
    return DetectConfig.from_mapping(merged)


def lifecycle_config(fabric: str) -> tuple[dict[str, LifecycleConfig], set[str]]:
    """``for`` / ``keep_firing`` per kind, and the kinds switched off for this fabric."""
    config = dict(DEFAULT_LIFECYCLE)
    off: set[str] = set()
    for rule in Rule.objects.filter(fabric=fabric):
        config[rule.kind] = LifecycleConfig(for_s=rule.for_s, keep_firing_s=rule.keep_firing_s)
        if not rule.enabled:
            off.add(rule.kind)
    return config, off


def _silenced(fabric: str, kind: str, key: str, now: datetime) -> bool:
    # Active silences of one fabric are few: match them here rather than in SQL.
    active = Silence.objects.filter(fabric=fabric, starts_at__lte=now, ends_at__gt=now).filter(
        Q(kind="") | Q(kind=kind)
    )
    return any(s.key_contains in key for s in active)


@transaction.atomic
def record_window(
    fabric: str,
    findings: WindowFindings,
    geo: FabricGeometry,
    *,
    now: datetime | None = None,
    run_name: str = "",
    owner_id: int | None = None,
    rank_of_port: Mapping[int, int] | None = None,
    link_base: str = "",
) -> list[AlertTransition]:
    """Evaluate one window's findings for one fabric (and run): store transitions, group them into
    episodes, record the trajectory, and enqueue notifications. Returns the new transitions."""
    now = now or timezone.now()
    config, off = lifecycle_config(fabric)
    conds = [c for c in conditions(findings, geo) if c.kind not in off]
    rows = {
        a.fingerprint: a
        for a in Alert.objects.select_for_update().filter(
            fabric=fabric, run_name=run_name, state__in=(Alert.State.PENDING, Alert.State.FIRING)
        )
    }
    slots = {
        fp: Slot(
            a.kind, a.key, a.state, _ns(a.active_since), _ns(a.last_true), Condition(a.kind, a.key, a.summary)
        )  # type: ignore[arg-type]
        for fp, a in rows.items()
    }
    new_slots, changes = advance(slots, conds, _ns(now), fabric=fabric, run=run_name, config=config)
    episode = Episode.objects.filter(fabric=fabric, run_name=run_name, closed_at=None).first()
    stored: list[AlertTransition] = []
    for ch in changes:
        alert = rows.get(ch.fingerprint)
        if alert is None:
            alert, _ = Alert.objects.get_or_create(
                fingerprint=ch.fingerprint,
                defaults={
                    "fabric": fabric,
                    "kind": ch.kind,
                    "key": ch.key,
                    "run_name": run_name,
                    "state": ch.to_state,
                    "active_since": now,
                    "last_true": now,
                },
            )
            rows[ch.fingerprint] = alert
        alert.state = ch.to_state
        alert.summary = ch.condition.summary
        alert.details = dict(ch.condition.details)
        if ch.to_state == "pending":
            alert.active_since, alert.last_true = now, now
            alert.fired_at = alert.resolved_at = alert.acknowledged_at = None
            alert.acknowledged_by = None
        elif ch.to_state == "firing":
            if episode is None:
                episode = Episode.objects.create(
                    fabric=fabric, run_name=run_name, owner_id=owner_id, opened_at=now
                )
            alert.fired_at = now
            alert.episode = episode
            found = attribute_ports(
                fabric, _port_names(geo, ch.condition.ports) or [alert.key], alert.active_since, now
            )
            alert.attribution = found.as_json()
            if found.known and not episode.attribution.get("run_name"):
                episode.attribution = alert.attribution
            if ch.kind not in episode.kinds:
                episode.kinds = [*episode.kinds, ch.kind]
        elif ch.to_state == "resolved":
            alert.resolved_at = now
        alert.save()
        silenced = ch.to_state in ("firing", "resolved") and _silenced(fabric, ch.kind, ch.key, now)
        row = AlertTransition.objects.create(
            alert=alert,
            from_state=ch.from_state,
            to_state=ch.to_state,
            at=now,
            summary=ch.condition.summary,
            silenced=silenced,
        )
        stored.append(row)
        if ch.to_state in ("firing", "resolved") and not silenced:
            _enqueue(row, alert, episode, now, link_base)
    # Conditions that still hold: remember when they last held (keep_firing counts from here).
    still = [fp for fp, s in new_slots.items() if s.last_true_ns == _ns(now) and fp in rows]
    Alert.objects.filter(fingerprint__in=still).update(last_true=now)
    if episode is not None and episode.pk:
        if findings.incast and (findings.migrated or not episode.trajectory):
            step = dataclasses.asdict(trajectory_step(findings, geo, rank_of_port))
            episode.trajectory = [*episode.trajectory, step][-500:]
            episode.migrations += int(findings.migrated)
        if not episode.alerts.filter(state=Alert.State.FIRING).exists():
            episode.closed_at = now
        episode.save()
    return stored


def _port_names(geo: FabricGeometry, ports: tuple[int, ...]) -> list[str]:
    idx = geo.index
    return [f"{idx.switch_names[idx.switch_of[p]]}:{idx.port_names[p]}" for p in ports[:4]]


def _message(
    row: AlertTransition, alert: Alert, episode: Episode | None, receiver: Receiver, link_base: str
) -> Message:
    details = dict(alert.details)
    if episode is not None and episode.trajectory:
        details["trajectory"] = [",".join(s["ports"]) for s in episode.trajectory]
    return Message(
        id=f"msg_{row.pk}_{receiver.pk}",
        fingerprint=alert.fingerprint,
        fabric=alert.fabric,
        kind=alert.kind,
        key=alert.key,
        status=row.to_state,
        summary=alert.summary,
        starts_at=alert.active_since.isoformat(),
        ends_at=alert.resolved_at.isoformat() if alert.resolved_at else "",
        run_name=alert.run_name,
        attribution=alert.attribution_line,
        link=f"{link_base}/alerts/episodes/{episode.pk}/" if (episode and link_base) else "",
        details=details,
    )


def _enqueue(
    row: AlertTransition, alert: Alert, episode: Episode | None, now: datetime, link_base: str
) -> None:
    owner_id = episode.owner_id if episode else None
    receivers = Receiver.objects.filter(disabled=False).filter(Q(fabric="") | Q(fabric=alert.fabric))
    receivers = (
        receivers.filter(Q(owner=None) | Q(owner_id=owner_id)) if owner_id else receivers.filter(owner=None)
    )
    for rcv in receivers:
        if rcv.kinds and alert.kind not in rcv.kinds:
            continue
        if row.to_state == "resolved" and not rcv.send_resolved:
            continue
        msg = _message(row, alert, episode, rcv, link_base)
        Outbox.objects.get_or_create(
            transition=row,
            receiver=rcv,
            defaults={"payload": dataclasses.asdict(msg), "created_at": now, "next_attempt_at": now},
        )


def acknowledge(alert: Alert, user: Any, now: datetime | None = None) -> None:
    Alert.objects.filter(pk=alert.pk).update(acknowledged_by=user, acknowledged_at=now or timezone.now())


def silence(
    fabric: str,
    *,
    kind: str = "",
    key_contains: str = "",
    duration_s: float = 3600.0,
    comment: str = "",
    user: Any = None,
    now: datetime | None = None,
) -> Silence:
    now = now or timezone.now()
    return Silence.objects.create(
        fabric=fabric,
        kind=kind,
        key_contains=key_contains,
        starts_at=now,
        ends_at=now + timedelta(seconds=duration_s),
        comment=comment,
        created_by=user,
    )


# --- delivery --------------------------------------------------------------------------------


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
        transport_for(rcv.kind, Target(rcv.name, rcv.url, rcv.secret), policy()).notify(
            Message(**row.payload)
        )
    except TransportError as exc:
        return _failed(row, rcv, exc, now)
    Outbox.objects.filter(id=row.id).update(status=Outbox.Status.SENT, sent_at=now, last_error="")
    if rcv.last_error:
        Receiver.objects.filter(id=rcv.id).update(last_error="")
    return Outbox.Status.SENT


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
