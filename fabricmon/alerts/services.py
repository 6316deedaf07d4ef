"""The verbs of alerting: evaluate a window and store what changed (``record_window``), silence and
acknowledge.

Pipeline (Alertmanager's stages, as functions)::

    record_window ─ conditions → lifecycle (for / keep_firing, dedup by fingerprint)
                  → AlertTransition rows → episode grouping + trajectory + culprit
                  → silence stage → grouping.admit (each receiver's notification group)
    grouping.py   ─ group_wait / group_interval / repeat_interval → one Outbox row per flush
    delivery.py   ─ claim (conditional UPDATE) → transport → sent | retry with backoff /
                    Retry-After | permanent failure (receiver disabled, error shown)

Every function takes ``now`` so tests drive a controllable clock.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from fabricmon.alerts import attribution, grouping
from fabricmon.alerts.culprit import EventCache, culprit_of_ports
from fabricmon.alerts.models import (
    Alert,
    AlertTransition,
    Episode,
    Receiver,
    Rule,
    Silence,
    family_of,
)
from fabricmon.alerts.transports import Message
from fabricmon.core.detection.conditions import Condition, conditions, origin_step, trajectory_step
from fabricmon.core.detection.config import DetectConfig
from fabricmon.core.detection.geometry import FabricGeometry
from fabricmon.core.detection.lifecycle import DEFAULT_LIFECYCLE, LifecycleConfig, Slot, Transition, advance
from fabricmon.core.detection.window import WindowFindings

log = logging.getLogger(__name__)


def _ns(dt: datetime) -> int:
    return int(dt.timestamp() * 1e9)


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
    episodes, record the trajectory, and enqueue notifications. Returns the new transitions.

    Then, after that transaction, look again for the culprits still unnamed: that only reads event
    blocks (each alert's row is updated on its own), and inside the transaction it held SQLite's one
    write lock — every ingest batch waiting — while tens of alerts decoded a large job's events."""
    window = _Window(fabric, run_name, owner_id, geo, now or timezone.now(), link_base, EventCache())
    with transaction.atomic():
        stored, firing = _record(window, findings, rank_of_port)
    attribution.refresh(fabric, run_name, firing,
                        hot_now=_port_names(geo, tuple(int(p) for p in findings.hot_ports)), now=window.now,
                        episodes=window.episodes, cache=window.cache)
    return stored


def _record(
    window: _Window, findings: WindowFindings, rank_of_port: Mapping[int, int] | None,
) -> tuple[list[AlertTransition], list[Alert]]:
    """``record_window``'s transaction: returns the new transitions and the alerts firing now."""
    fabric, run_name, geo, now = window.fabric, window.run_name, window.geo, window.now
    config, off = lifecycle_config(fabric)
    conds = [c for c in conditions(findings, geo) if c.kind not in off]
    rows = _open_alerts(fabric, run_name)
    slots = {fp: _slot(a) for fp, a in rows.items()}
    held = _held_without_data(findings, slots, now)
    slots = {fp: s for fp, s in slots.items() if fp not in held}
    new_slots, changes = advance(slots, conds, _ns(now), fabric=fabric, run=run_name, config=config)
    window.episodes = {e.family: e for e in Episode.objects.filter(fabric=fabric, run_name=run_name,
                                                                   closed_at=None)}
    stored = [_apply(window, rows, ch) for ch in changes]
    # Conditions that still hold: remember when they last held (keep_firing counts from here).
    still = [fp for fp, s in new_slots.items() if s.last_true_ns == _ns(now) and fp in rows]
    Alert.objects.filter(fingerprint__in=still).update(last_true=now)
    for episode in window.episodes.values():
        _follow_episode(episode, findings, geo, rank_of_port, now)
    return stored, [a for a in rows.values() if a.state == Alert.State.FIRING]


@transaction.atomic
def record_check(
    fabric: str, kind: str, conds: list[Condition], geo: FabricGeometry, *, now: datetime | None = None,
    link_base: str = "",
) -> list[AlertTransition]:
    """Alerts of one ``kind`` judged by a periodic check rather than per window (the LLDP cabling
    check): only that kind's open alerts advance, with ``conds`` as everything the check found —
    the same lifecycle, rows, episodes, silences and outbox as :func:`record_window`."""
    now = now or timezone.now()
    config, off = lifecycle_config(fabric)
    conds = [c for c in conds if c.kind == kind and kind not in off]
    rows = {fp: a for fp, a in _open_alerts(fabric, "").items() if a.kind == kind}
    slots = {fp: _slot(a) for fp, a in rows.items()}
    new_slots, changes = advance(slots, conds, _ns(now), fabric=fabric, config=config)
    window = _Window(fabric, "", None, geo, now, link_base, EventCache())
    window.episodes = {e.family: e for e in Episode.objects.filter(fabric=fabric, run_name="", closed_at=None,
                                                                   family=family_of(kind))}
    stored = [_apply(window, rows, ch) for ch in changes]
    still = [fp for fp, s in new_slots.items() if s.last_true_ns == _ns(now) and fp in rows]
    Alert.objects.filter(fingerprint__in=still).update(last_true=now)
    for episode in window.episodes.values():
        if not episode.alerts.filter(state=Alert.State.FIRING).exists():
            episode.closed_at = now
            episode.save(update_fields=["closed_at"])
    return stored


# A window in which no port had data says nothing about congestion: incast alerts keep their state
# over it, and their keep-firing time counts from its end (a poll round every switch missed must not
# end an episode while the hotspot moves) — for this many blind windows in a row at most, after
# which they resolve as usual (and target_down has long said why).
HOLD_WITHOUT_DATA_WINDOWS = 30


def _held_without_data(findings: WindowFindings, slots: Mapping[str, Slot], now: datetime) -> set[str]:
    if findings.has_data or findings.blind_windows > HOLD_WITHOUT_DATA_WINDOWS:
        return set()
    held = {fp for fp, s in slots.items() if family_of(s.kind) == "incast"}
    Alert.objects.filter(fingerprint__in=held).update(last_true=now)
    return held


@dataclasses.dataclass
class _Window:
    """What every transition of one evaluated window shares (and the episode it may open)."""

    fabric: str
    run_name: str
    owner_id: int | None
    geo: FabricGeometry
    now: datetime
    link_base: str
    cache: EventCache  # the job's events, decoded once for every culprit this window names
    episodes: dict[str, Episode] = dataclasses.field(default_factory=dict)  # open ones, by family


def _open_alerts(fabric: str, run_name: str) -> dict[str, Alert]:
    """The fabric's (and run's) pending and firing alerts, locked for this window, by fingerprint."""
    return {
        a.fingerprint: a
        for a in Alert.objects.select_for_update().filter(
            fabric=fabric, run_name=run_name, state__in=(Alert.State.PENDING, Alert.State.FIRING)
        )
    }


def _slot(a: Alert) -> Slot:
    cond = Condition(a.kind, a.key, a.summary)
    return Slot(a.kind, a.key, a.state, _ns(a.active_since), _ns(a.last_true), cond)  # type: ignore[arg-type]


def _apply(w: _Window, rows: dict[str, Alert], ch: Transition) -> AlertTransition:
    """Store one state change: the alert row, its episode and culprit when it fires, the transition
    row, and the notifications of a firing or resolution that no silence covers."""
    alert = rows.get(ch.fingerprint)
    if alert is None:
        alert, _ = Alert.objects.get_or_create(
            fingerprint=ch.fingerprint,
            defaults={"fabric": w.fabric, "kind": ch.kind, "key": ch.key, "run_name": w.run_name,
                      "state": ch.to_state, "active_since": w.now, "last_true": w.now},
        )
        rows[ch.fingerprint] = alert
    alert.state = ch.to_state
    alert.summary = ch.condition.summary
    alert.details = dict(ch.condition.details)
    if ch.to_state == "pending":
        alert.active_since, alert.last_true = w.now, w.now
        # resolved_at stays: the last firing's end, which its culprit is still looked up over for a
        # while (attribution.LATE_S) — at 16,896 ports hot ports flap, and a resolved alert going
        # pending again lost the look-up and never named the phase its job's late events showed
        alert.fired_at = alert.acknowledged_at = None
        alert.acknowledged_by = None
    elif ch.to_state == "firing":
        _fire(w, alert, ch)
    elif ch.to_state == "resolved":
        alert.resolved_at = w.now
        # the firing's start: active_since moves on if the alert goes pending again (its end,
        # resolved_at, stays until the next firing)
        alert.attribution = {**alert.attribution, "since_ns": _ns(alert.active_since)}
    alert.save()
    silenced = ch.to_state in ("firing", "resolved") and _silenced(w.fabric, ch.kind, ch.key, w.now)
    row = AlertTransition.objects.create(
        alert=alert, from_state=ch.from_state, to_state=ch.to_state, at=w.now,
        summary=ch.condition.summary, silenced=silenced,
    )
    if ch.to_state in ("firing", "resolved") and not silenced:
        _enqueue(row, alert, alert.episode, w.now, w.link_base)
    return row


def _fire(w: _Window, alert: Alert, ch: Transition) -> None:
    """A firing alert joins its family's open episode (opened now if there is none) with its culprit."""
    family = family_of(ch.kind)
    episode = w.episodes.get(family)
    if episode is None:
        episode = w.episodes[family] = Episode.objects.create(
            fabric=w.fabric, run_name=w.run_name, owner_id=w.owner_id, opened_at=w.now, family=family)
    alert.fired_at, alert.resolved_at = w.now, None
    alert.episode = episode
    found = culprit_of_ports(w.fabric, _port_names(w.geo, ch.condition.ports) or [alert.key],
                             alert.active_since, w.now, cache=w.cache)
    alert.attribution = {**found.as_json(), "checked_ns": _ns(w.now)}
    dirty = []
    if found.known and (not episode.attribution.get("run_name") or
                        (found.phase and not attribution.phase_named(episode.attribution))):
        episode.attribution = alert.attribution
        dirty.append("attribution")
    if ch.kind not in episode.kinds:
        episode.kinds = [*episode.kinds, ch.kind]
        dirty.append("kinds")
    if dirty:  # (only these: ``_follow_episode`` saves the trajectory when it changes)
        episode.save(update_fields=dirty)


def _follow_episode(
    episode: Episode, findings: WindowFindings, geo: FabricGeometry,
    rank_of_port: Mapping[int, int] | None, now: datetime,
) -> None:
    """Add the window's hot set to an incast episode's trajectory when it moved (or starts it); close
    the episode when none of its alerts fires any more. An episode opened by a hop (its moving-incast
    alert fired on it) starts where the hotspot came from: at 16,896 ports the per-port alerts flap
    with the job's bursts, the episode closes between hops, and a trajectory that began at the hop's
    end showed no move — the hop that opened it was missing from its own episode."""
    changed: list[str] = []
    if episode.family == "incast" and findings.incast and (findings.migrated or not episode.trajectory):
        origin = origin_step(findings, geo, rank_of_port) if not episode.trajectory else None
        steps = [dataclasses.asdict(s) for s in (origin, trajectory_step(findings, geo, rank_of_port)) if s]
        episode.trajectory = [*episode.trajectory, *steps][-500:]
        episode.migrations += int(findings.migrated)
        changed += ["trajectory", "migrations"]
    if not episode.alerts.filter(state=Alert.State.FIRING).exists():
        episode.closed_at = now
        changed.append("closed_at")
    if changed:  # not every window: the trajectory is up to 500 steps (~300 KB at 16,896 ports),
        # and rewriting it each second held SQLite's write lock for seconds at that size
        episode.save(update_fields=changed)


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
        # a resolution goes to the group even without send_resolved: its firing set shrinks
        grouping.admit(rcv, _message(row, alert, episode, rcv, link_base), now)


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
