"""What one scrape reads, in one pass, before anything is formatted.

Everything ``/metrics`` shows is the shared state every process sees — the live window and
collector health in Redis, alerts and the outbox in the database, the shared counters, the Celery
queues in the broker — so two web processes answer a scrape alike (no per-process counters).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import redis
from django.conf import settings
from django.db.models import Count

from fabricmon.alerts import evaluation
from fabricmon.alerts.models import Alert, Outbox
from fabricmon.base import counters
from fabricmon.base.connections import connect
from fabricmon.core.telemetry.frames import Frame
from fabricmon.metrics.ports import PortsSample, choose_ports, labels_for
from fabricmon.telemetry import live_window
from fabricmon.topology.fabric_view import find_view
from fabricmon.topology.models import Fabric

# A frame older than this many poll intervals (and at least STALE_MIN_S) is not exported per port:
# Prometheus would store the last values again at every scrape as if they were fresh.
STALE_INTERVALS = 3
STALE_MIN_S = 5.0
ACTIVE_STATES = (Alert.State.PENDING, Alert.State.FIRING)
# kombu's Redis transport keeps a queue's priority levels in lists named "<queue>\x06\x16<n>".
PRIORITY_SUFFIXES = ("", "\x06\x163", "\x06\x166", "\x06\x169")


@dataclass
class FabricState:
    """One fabric as the scrape saw it."""

    name: str
    frames: int = 0
    frame: Frame | None = None
    health: dict[str, dict[str, Any]] = field(default_factory=dict)
    hot_ports: int | None = None  # None: never evaluated, or evaluated on another topology
    ports: PortsSample | None = None  # None: no fresh frame on the current topology
    omitted: int = 0
    why_no_ports: str = ""


@dataclass
class ScrapeState:
    fabrics: list[FabricState]
    alerts: list[tuple[str, str, str, int]]  # fabric, kind, state, count (active ones)
    notifications: list[tuple[str, str, int]]  # receiver kind, outbox status, rows
    counters: dict[str, int]
    queues: dict[str, int]


def _fabric(r: redis.Redis, name: str, max_ports: int, now_s: float) -> FabricState:
    st = FabricState(name)
    st.frames = live_window.length(r, name)
    st.health = live_window.read_health(r, name)
    entry = live_window.latest(r, name) if st.frames else None
    view = find_view(name)
    hot = evaluation.hot_set(r, name)
    if view is not None and hot is not None and hot[0] == view.index.version:
        st.hot_ports = len(hot[1])
    if entry is None:
        st.why_no_ports = "no frames"
        return st
    st.frame = frame = entry[1]
    if view is None or frame.topology_version != view.index.version or frame.n_ports != len(view.index):
        st.why_no_ports = "frame on another topology version"
        return st
    if now_s - frame.ts_ns / 1e9 > max(STALE_INTERVALS * frame.interval_s, STALE_MIN_S):
        st.why_no_ports = "stale frame"
        return st
    chosen = choose_ports(frame, max_ports)
    st.omitted = frame.n_ports - len(chosen)
    hot_pos = np.asarray(hot[1] if st.hot_ports is not None and hot else [], dtype=np.int64)
    st.ports = PortsSample(frame, chosen, labels_for(view, name, view.index, view.peers),
                           hot_pos[(hot_pos >= 0) & (hot_pos < frame.n_ports)])
    return st


def _queues(queue_names: set[str]) -> dict[str, int]:
    """Messages waiting in each Celery queue (Redis list lengths); empty for a non-Redis broker."""
    url = str(settings.CELERY_BROKER_URL)
    if urlsplit(url).scheme not in ("redis", "rediss", "unix"):
        return {}
    r = connect(url)
    try:
        pipe = r.pipeline(transaction=False)
        names = sorted(queue_names)
        for q in names:
            for suffix in PRIORITY_SUFFIXES:
                pipe.llen(q + suffix)
        lens = pipe.execute()
    finally:
        r.close()
    k = len(PRIORITY_SUFFIXES)
    return {q: int(sum(lens[i * k:(i + 1) * k])) for i, q in enumerate(names)}


def read_state(r: redis.Redis | None = None) -> ScrapeState:
    own = r is None
    r = r or connect()
    try:
        # Fabrics of the topology database only: a window left in Redis by a deleted fabric has no
        # labels to give its ports (and is not worth decoding at every scrape).
        names = sorted(Fabric.objects.values_list("name", flat=True))
        now_s = time.time()
        fabrics = [_fabric(r, n, settings.FABRICMON_METRICS_MAX_PORTS, now_s) for n in names]
        shared = counters.read_all(r)
    finally:
        if own:
            r.close()
    alerts = [(row["fabric"], row["kind"], row["state"], row["n"]) for row in
              Alert.objects.filter(state__in=ACTIVE_STATES).values("fabric", "kind", "state")
              .annotate(n=Count("id")).order_by()]
    notifications = [(row["receiver__kind"], row["status"], row["n"]) for row in
                     Outbox.objects.values("receiver__kind", "status").annotate(n=Count("id")).order_by()]
    queues = _queues({"celery", settings.FABRICMON_COLLECTOR_QUEUE, settings.FABRICMON_EVALUATION_QUEUE,
                      settings.FABRICMON_IMPORT_QUEUE, settings.FABRICMON_DELIVERY_QUEUE})
    return ScrapeState(fabrics, alerts, notifications, shared, queues)
