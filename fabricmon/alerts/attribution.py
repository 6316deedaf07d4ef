"""Keeping an incast alert's culprit named while the job's events are still arriving.

An alert names its culprit when it fires (``services._fire``), from the events stored by then. A
job rarely has them stored yet: the probe posts in batches, a sampling job (the demo's twin)
reports a block of steps out of every k, and a hot port is often hot for less than one batch. So
an incast-family alert whose culprit has no (layer, phase) yet looks again, every
``REFRESH_S``, over its whole span so far — not only the last few seconds — and keeps looking for
``LATE_S`` after it resolved, because the events of its last seconds may post after that. A
moving incast looks at every port its episode visited, most recent first.

Cost is bounded: at most ``REFRESH_S`` apart per alert, over at most ``LOOKBACK_S`` of its span —
the newest part the job has reported events for so far (``culprit.culprit_of_port``;
``jobs.blocks.columns_near`` decodes only the blocks overlapping it, once per run), and only for
alerts that still lack a phase. The look-back is short on purpose: a 256-GPU job's events carry
2 × 256 per-peer counts each, so three minutes of a densely reporting job decoded every few seconds
cost a worker gigabytes (the soak's worker grew to 3.2 GB with 180 s).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from fabricmon.alerts.culprit import EventCache, culprit_of_ports
from fabricmon.alerts.models import Alert, Episode, family_of

REFRESH_S = 5.0  # how often an alert without a named phase looks again
LOOKBACK_S = 40.0  # … over at most this much of its span (a sampled job reports every ~6-12 s)
LATE_S = 90.0  # … and for this long after it resolved (its last events post late)


def _ns(dt: datetime) -> int:
    return int(dt.timestamp() * 1e9)


def phase_named(attribution: Mapping[str, Any]) -> bool:
    return bool(attribution.get("run_name")) and bool(attribution.get("phase"))


def _visited(episode: Episode | None) -> list[str]:
    """The ports an episode's hot set visited, most recent first, each once."""
    seen: dict[str, None] = {}
    for step in reversed((episode.trajectory if episode else []) or []):
        for name in step.get("ports", []):
            seen.setdefault(str(name), None)
    return list(seen)


def _span(alert: Alert, now: datetime) -> tuple[datetime, datetime]:
    """The time a culprit is looked for over: a firing alert's span so far, else its last firing's
    (its start kept at resolution: ``active_since`` moves on when the alert goes pending
    again; ``resolved_at`` stays until it fires again)."""
    if alert.state == Alert.State.FIRING:
        return alert.active_since, now
    since = alert.attribution.get("since_ns")
    start = alert.active_since if since is None else datetime.fromtimestamp(since / 1e9, tz=UTC)
    return start, alert.resolved_at or now


def refresh(
    fabric: str, run_name: str, firing: Iterable[Alert], *, hot_now: list[str], now: datetime,
    episodes: Mapping[str, Episode], cache: EventCache | None = None,
) -> None:
    """Look again for the culprit of ``firing`` incast-family alerts and of those resolved in the
    last ``LATE_S`` whose culprit has no phase; store what is found on the alert and its episode."""
    # resolved in the last LATE_S, whatever came after: a flapping port's alert is often pending
    # or inactive again by the time its job's events for the firing arrive
    late = Alert.objects.filter(
        fabric=fabric, run_name=run_name, kind__in=("incast", "moving_incast"),
        resolved_at__gte=now - timedelta(seconds=LATE_S),
    ).exclude(state=Alert.State.FIRING).select_related("episode")
    now_ns = _ns(now)
    cache = cache or EventCache()  # one decode of the job's events for every alert of the window
    for alert in [*firing, *late]:
        if family_of(alert.kind) != "incast" or phase_named(alert.attribution):
            continue
        if now_ns - int(alert.attribution.get("checked_ns", 0)) < REFRESH_S * 1e9:
            continue
        episode = alert.episode if alert.episode_id else None
        if alert.state == Alert.State.FIRING:
            episode = episodes.get("incast", episode)
        if alert.kind == "moving_incast":
            ports = list(dict.fromkeys([*(hot_now if alert.state == Alert.State.FIRING else []),
                                        *_visited(episode)]))
        else:
            ports = [alert.key]
        t1, t2 = _span(alert, now)
        found = culprit_of_ports(fabric, ports or [alert.key], t1, t2, lookback_ns=int(LOOKBACK_S * 1e9),
                                 cache=cache)
        attribution = found.as_json() if found.known else dict(alert.attribution)
        attribution["checked_ns"] = now_ns
        if "since_ns" in alert.attribution:
            attribution["since_ns"] = alert.attribution["since_ns"]
        Alert.objects.filter(pk=alert.pk).update(attribution=attribution)
        alert.attribution = attribution
        if episode is not None and found.known and not phase_named(episode.attribution):
            episode.attribution = attribution
            Episode.objects.filter(pk=episode.pk).update(attribution=attribution)
