"""The open incast episodes of a fabric, drawn on its live heatmap: where the hot set was at each
migration (the trajectory), which alert kinds fire, and who is behind it (the culprit line).

The episode rows are the alerts app's; this module only reads them and turns port names into
heatmap rows (PortIndex positions). One socket follows them with :class:`IncidentFeed`, which asks
the database every ``tick_s`` for a small fingerprint (ids, migrations, update marks) and sends an
``incidents`` message only when it changed. What a message holds is bounded by what is on
screen: trajectory steps inside the heatmap's window (at most ``MAX_STEPS``), at most
``MAX_EPISODES`` episodes — never the whole history of a long episode.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from channels.db import database_sync_to_async
from django.urls import reverse

from fabricmon.alerts.models import Alert, Episode
from fabricmon.topology.fabric_view import find_view

MAX_EPISODES = 4
MAX_STEPS = 600  # one per window at most: a 10 min heatmap at 1 s polls
MAX_PORTS_PER_STEP = 8


def _positions(fabric: str) -> dict[str, int]:
    view = find_view(fabric)
    if view is None:
        return {}
    idx = view.index
    return {f"{idx.switch_names[int(idx.switch_of[p])]}:{idx.port_names[p]}": p for p in range(len(idx))}


def open_incidents(fabric: str, since_ns: int) -> dict[str, Any]:
    """The fabric's open incast episodes with their trajectory steps at or after ``since_ns``."""
    episodes = list(Episode.objects.filter(fabric=fabric, family="incast", closed_at=None)
                    .order_by("-opened_at")[:MAX_EPISODES])
    where = _positions(fabric) if episodes else {}
    out = []
    for ep in episodes:
        firing = list(ep.alerts.filter(state=Alert.State.FIRING).order_by("kind")
                      .values("kind", "summary", "attribution"))
        steps = [s for s in ep.trajectory if int(s.get("ts_ns", 0)) >= since_ns][-MAX_STEPS:]
        out.append({
            "id": ep.pk,
            "run_name": ep.run_name,
            "opened_ms": ep.opened_at.timestamp() * 1e3,
            "migrations": ep.migrations,
            "kinds": sorted({a["kind"] for a in firing}),
            "summary": firing[0]["summary"] if firing else "",
            "culprit": _culprit_line(ep, firing),
            "link": reverse("alerts:episode", args=[ep.pk]),
            "trajectory": [
                {
                    "ts_ms": int(s["ts_ns"]) / 1e6,
                    "ports": [where[n] for n in s.get("ports", ())[:MAX_PORTS_PER_STEP] if n in where],
                    "names": list(s.get("ports", ()))[:MAX_PORTS_PER_STEP],
                    "leaf_jump": bool(s.get("leaf_jump")),
                }
                for s in steps
            ],
        })
    return {"type": "incidents", "fabric": fabric, "episodes": out}


def _culprit_line(ep: Episode, firing: list[dict[str, Any]]) -> str:
    """The episode's culprit, else the first firing alert's that names one."""
    if ep.attribution.get("run_name"):
        return ep.attribution_line
    for a in firing:
        if (a["attribution"] or {}).get("run_name"):
            return str(a["attribution"].get("line") or "unknown")
    return "unknown"


def _fingerprint(fabric: str) -> tuple[Any, ...]:
    rows = Episode.objects.filter(fabric=fabric, family="incast", closed_at=None).values_list(
        "pk", "migrations", "kinds", "attribution"
    )
    firing = Alert.objects.filter(fabric=fabric, state=Alert.State.FIRING,
                                  kind__in=("incast", "moving_incast")).values_list("pk", "kind")
    return (tuple((pk, m, tuple(k), json.dumps(a, sort_keys=True)) for pk, m, k, a in rows),
            tuple(sorted(firing)))


@dataclass
class IncidentFeed:
    """One fabric socket's incident overlay: an ``incidents`` message on connect when an episode is
    open, and on every change (a new migration, an alert firing or resolving, a culprit named, an
    episode closing — the last one sends an empty list)."""

    fabric: str
    send_text: Callable[[dict[str, Any]], Awaitable[None]]
    window_start_ns: Callable[[], int]  # the heatmap window's left edge (0: no frame yet)
    tick_s: float = 2.0
    fingerprint: tuple[Any, ...] | None = None
    sizes: list[int] = field(default_factory=list)

    async def follow(self) -> None:
        while True:
            await self.update()
            await asyncio.sleep(self.tick_s)

    async def update(self) -> None:
        fp = await database_sync_to_async(_fingerprint)(self.fabric)
        if fp == self.fingerprint:
            return
        msg = await database_sync_to_async(open_incidents)(self.fabric, self.window_start_ns())
        first = self.fingerprint is None
        self.fingerprint = fp
        if first and not msg["episodes"]:
            return  # a quiet fabric's socket stays quiet: the page starts with no incidents
        self.sizes.append(len(json.dumps(msg, separators=(",", ":"))))
        await self.send_text(msg)
