"""The ``prometheus_client`` collectors of ``/metrics``: each turns a part of one scrape's
``ScrapeState`` into metric families when the registry asks (custom collectors, read at scrape
time — nothing is kept between scrapes)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from fabricmon.alerts.models import KINDS
from fabricmon.metrics.state import ACTIVE_STATES, ScrapeState


class _FromState(Collector):
    def __init__(self, state: ScrapeState) -> None:
        self.state = state


class LiveWindowCollector(_FromState):
    """Per fabric: the newest frame's time and interval, the window's length, the per-port cap."""

    def collect(self) -> Iterator[Metric]:
        ts = GaugeMetricFamily("fabricmon_frame_timestamp_seconds",
                               "End of the interval the fabric's newest frame describes (Unix time).",
                               labels=["fabric"])
        interval = GaugeMetricFamily("fabricmon_frame_interval_seconds",
                                     "Poll interval of the fabric's newest frame.", labels=["fabric"])
        frames = GaugeMetricFamily("fabricmon_live_window_frames",
                                   "Frames held in the fabric's live window in Redis.", labels=["fabric"])
        ports = GaugeMetricFamily(
            "fabricmon_metrics_ports_exported",
            "Ports with per-port series in this scrape (0: no fresh frame on the current topology).",
            labels=["fabric"])
        omitted = GaugeMetricFamily("fabricmon_metrics_ports_omitted",
                                    "Ports left out of the per-port series by FABRICMON_METRICS_MAX_PORTS.",
                                    labels=["fabric"])
        for f in self.state.fabrics:
            frames.add_metric([f.name], f.frames)
            if f.frame is not None:
                ts.add_metric([f.name], f.frame.ts_ns / 1e9)
                interval.add_metric([f.name], f.frame.interval_s)
            ports.add_metric([f.name], len(f.ports.chosen) if f.ports else 0)
            omitted.add_metric([f.name], f.omitted)
        yield from (ts, interval, frames, ports, omitted)


class IncastCollector(_FromState):
    """Per fabric: the hot set's size, and active alerts by kind and state (zeros included, so a
    quiet fabric reads 0, not absent)."""

    def collect(self) -> Iterator[Metric]:
        hot = GaugeMetricFamily("fabricmon_incast_hot_ports",
                                "Ports in the moving-incast detector's current hot set.", labels=["fabric"])
        alerts = GaugeMetricFamily("fabricmon_alerts", "Alerts pending or firing, by kind and state.",
                                   labels=["fabric", "kind", "state"])
        active = {(fab, kind, state): n for fab, kind, state, n in self.state.alerts}
        fabrics = sorted({f.name for f in self.state.fabrics} | {k[0] for k in active})
        for f in self.state.fabrics:
            if f.hot_ports is not None:
                hot.add_metric([f.name], f.hot_ports)
        for fab in fabrics:
            for kind, _ in KINDS:
                for state in ACTIVE_STATES:
                    alerts.add_metric([fab, kind, str(state)], active.get((fab, kind, state), 0))
        yield from (hot, alerts)


class CollectorHealthCollector(_FromState):
    """Per switch: what its collector last wrote to the health hash."""

    def collect(self) -> Iterator[Metric]:
        labels = ["fabric", "switch"]
        up = GaugeMetricFamily("fabricmon_collector_up", "1 if the switch's last poll succeeded.",
                               labels=labels)
        poll = GaugeMetricFamily("fabricmon_collector_poll_duration_seconds",
                                 "Duration of the switch's last poll.", labels=labels)
        last = GaugeMetricFamily("fabricmon_collector_last_success_timestamp_seconds",
                                 "When the switch was last read successfully (Unix time).", labels=labels)
        interval = GaugeMetricFamily("fabricmon_collector_interval_seconds",
                                     "The switch's poll interval.", labels=labels)
        failing = GaugeMetricFamily("fabricmon_collector_consecutive_failures",
                                    "Polls failed in a row.", labels=labels)
        polls = CounterMetricFamily("fabricmon_collector_polls", "Polls of the switch.", labels=labels)
        late = CounterMetricFamily("fabricmon_collector_late_polls",
                                   "Polls that finished after their tick's frame was built.", labels=labels)
        errors = CounterMetricFamily("fabricmon_collector_errors", "Failed polls by reason.",
                                     labels=[*labels, "reason"])
        for f in self.state.fabrics:
            for switch, h in sorted(f.health.items()):
                key = [f.name, switch]
                up.add_metric(key, 1.0 if h.get("up") else 0.0)
                if h.get("poll_ms") is not None:
                    poll.add_metric(key, float(h["poll_ms"]) / 1e3)
                if h.get("last_success_ns"):
                    last.add_metric(key, int(h["last_success_ns"]) / 1e9)
                if h.get("interval_s") is not None:
                    interval.add_metric(key, float(h["interval_s"]))
                failing.add_metric(key, int(h.get("consecutive_failures", h.get("errors", 0)) or 0))
                polls.add_metric(key, int(h.get("polls", 0) or 0))
                late.add_metric(key, int(h.get("late_polls", 0) or 0))
                for reason, n in sorted((h.get("error_counts") or {}).items()):
                    errors.add_metric([*key, str(reason)], int(n))
        yield from (up, poll, last, interval, failing, polls, late, errors)


class PipelineCollector(_FromState):
    """Ingest totals (shared Redis counters), the notification outbox, Celery queue depths."""

    def collect(self) -> Iterator[Metric]:
        events = CounterMetricFamily("fabricmon_ingest_events", "Phase events received, by path and outcome.",
                                     labels=["path", "outcome"])
        batches = CounterMetricFamily("fabricmon_ingest_batches", "Event batches received, by path.",
                                      labels=["path"])
        slow = CounterMetricFamily(
            "fabricmon_sqlite_slow_writes",
            "SQLite write transactions that waited for (kind=waited) or held (kind=held) the database's one "
            "write lock longer than FABRICMON_SQLITE_SLOW_WRITE_S; each is logged with the code that ran it.",
            labels=["kind"])
        for name, total in sorted(self.state.counters.items()):
            parts = name.split(":")
            if parts[0] == "ingest_events" and len(parts) == 3:
                events.add_metric(parts[1:], total)
            elif parts[0] == "ingest_batches" and len(parts) == 2:
                batches.add_metric(parts[1:], total)
            elif parts[0] == "sqlite_slow_writes" and len(parts) == 2:
                slow.add_metric(parts[1:], total)
        outbox = GaugeMetricFamily(
            "fabricmon_notifications",
            "Notification outbox rows by receiver kind and status (sent and failed rows are kept for "
            "FABRICMON_ALERTS_RETENTION_DAYS).", labels=["receiver_kind", "status"])
        for kind, status, n in self.state.notifications:
            outbox.add_metric([kind, status], n)
        queues = GaugeMetricFamily("fabricmon_celery_queue_messages",
                                   "Messages waiting in a Celery queue of the broker.", labels=["queue"])
        for q, n in sorted(self.state.queues.items()):
            queues.add_metric([q], n)
        yield from (events, batches, slow, outbox, queues)


def registry_for(state: ScrapeState) -> CollectorRegistry:
    """A registry of one scrape's collectors (``auto_describe=False``: nothing collected twice)."""
    reg = CollectorRegistry(auto_describe=False)
    for cls in (LiveWindowCollector, IncastCollector, CollectorHealthCollector, PipelineCollector):
        reg.register(cls(state))
    return reg
