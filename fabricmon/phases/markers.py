"""A run's phase markers on the live fabric heatmap: which runs a fabric has, the markers of one
run's (step, layer, phase) instances on the server's clock with their clock gate, and the feed
that streams them beside the heatmap's columns.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
from channels.db import database_sync_to_async
from django.db.models import Q
from django.utils import timezone

from collectors.traces.schema import PHASES
from fabricmon.base.connections import connect
from fabricmon.core.phases.clocks import estimate_skew
from fabricmon.core.phases.gates import Gate, clock_gate, failing
from fabricmon.core.phases.timeline import grouped_median, instances
from fabricmon.jobs import blocks
from fabricmon.jobs.models import Run
from fabricmon.phases import refresher
from fabricmon.telemetry import live_window

# --- phase markers on the live fabric heatmap ----------------------------------------------------
RECENT_RUN_S = 6 * 3600  # a run ended this long ago is still offered beside the live heatmap
MAX_MARKERS = 5000  # per answer; the browser asks again from the newest marker it holds


def fabric_runs(fabric: str, recent_s: float = RECENT_RUN_S) -> list[dict[str, Any]]:
    """Runs on ``fabric`` that are running or ended within ``recent_s`` (newest first)."""
    cutoff = timezone.now() - timedelta(seconds=recent_s)
    runs = Run.objects.filter(fabric=fabric).filter(
        Q(state=Run.State.RUNNING) | Q(ended_at__gte=cutoff) | Q(started_at__gte=cutoff)
    )
    return [
        {"id": r.pk, "name": r.name, "state": r.state, "started_at": r.started_at.isoformat()}
        for r in runs.order_by("-started_at")[:50]
    ]


def _poll_s(fabric: str) -> float:
    """The fabric's poll interval (its newest frame's), which the heatmap's columns are: 1 s when
    there is no frame yet."""
    newest = live_window.latest(connect(), fabric)
    return float(newest[1].interval_s) if newest is not None else 1.0


def counters_gate(run: Run) -> Gate | None:
    """The run's ``counters_of_run`` gate as its phase views judge it (None: no counters or no
    view yet): do the counters on the run's ports carry the run's traffic?"""
    snap, _ = refresher.recent_or_now(run)  # a judgement over the run: a recent one will do
    view = snap.views.get("measured")
    return next((g for g in view.gates if g.name == "counters_of_run"), None) if view else None


_RANK = {"pass": 0, "flag": 1, "withhold": 2}


def phase_markers(run: Run, since_ns: int = 0) -> dict[str, Any]:
    """The run's (step, layer, phase) instances ending at or after ``since_ns``, as time-axis markers
    (median start/end across ranks, server clock), with the gates that say whether they may be
    read against the heatmap: the clock gate (markers on the right columns) and the phase views'
    ``counters_of_run`` (the cells under them are the run's traffic, not another job's).

    Event times were moved onto the server's clock at ingest (host time + the probe's exchanged
    offset), so markers line up with counter frames when the clock gate passes; when it does not,
    the answer says so and the page draws them flagged, never as if aligned. Only blocks that can
    hold such events are read (by their start_ns_max), so a poll costs the new span, not the run.
    """
    cols = blocks.columns_ending_after(run, since_ns)
    ok = (cols.step >= 0) & (cols.layer >= 0)
    out: dict[str, Any] = {"run": run.pk, "name": run.name, "state": run.state, "markers": []}
    if not ok.any():
        out |= {
            "clock": None,
            "gate": None,
            "verdict": "withhold",
            "cursor_ns": since_ns,
            "reason": "no phase events with step and layer in this span yet",
        }
        return out
    step, layer, code = cols.step[ok], cols.layer[ok], cols.phase[ok]
    rank, start, end = cols.rank[ok], cols.start_ns[ok], cols.end_ns[ok]
    triples, inst = instances(step, layer, code)
    world = run.world_size or int(rank.max()) + 1
    offset_known = bool((cols.clock_offset_ns[ok] != 0).all())
    clock = estimate_skew(inst, rank, end, world, offset_known=offset_known)
    s_med = grouped_median(inst, start.astype(np.int64), len(triples))
    e_med = grouped_median(inst, end.astype(np.int64), len(triples))
    phase_s = float(np.median(e_med - s_med)) / 1e9
    gate = clock_gate(clock.error_bound_ns / 1e9, offset_known, _poll_s(run.fabric))
    share = counters_gate(run)
    gates = [gate] + ([share] if share is not None else [])
    worst = max(gates, key=lambda g: _RANK[g.verdict])
    keep = np.flatnonzero(e_med >= since_ns)
    keep = keep[np.argsort(e_med[keep], kind="stable")][:MAX_MARKERS]
    out["markers"] = [
        {
            "step": int(triples[i, 0]),
            "layer": int(triples[i, 1]),
            "phase": PHASES[int(triples[i, 2])],
            "start_ms": int(s_med[i]) / 1e6,
            "end_ms": int(e_med[i]) / 1e6,
        }
        for i in keep
    ]
    bad = failing(gates)
    out |= {
        "clock": {**clock.as_dict(), "median_phase_s": phase_s},
        "gate": gate.as_dict(),  # the clock gate
        "counters": share.as_dict() if share is not None else None,
        "verdict": worst.verdict,
        "reason": "; ".join(g.reason for g in bad) if bad else gate.reason,
        "cursor_ns": int(e_med[keep[-1]]) if len(keep) else since_ns,
    }
    return out


JUDGE_EVERY_S = 15.0
MARKER_LOOKBACK_NS = 10_000_000_000  # late ranks move a recent marker's median: look back this far


@dataclass
class MarkerFeed:
    """A selected run's phase markers for one fabric socket: every marker of the heatmap's window
    first (``reset: true``), then only new or moved ones, plus the clock gate when it changes.

    Sent as ``{"type": "markers", run, name, state, verdict, reason, clock, gate, markers,
    reset}`` text messages beside the binary columns. Wakes on its tick; an unchanged run (same
    event blocks, same state) costs one small query and sends nothing."""

    run_id: int
    fabric: str
    send_text: Callable[[dict[str, Any]], Awaitable[None]]
    window_start_ns: Callable[[], int]  # the heatmap window's left edge (0: no frame yet)
    tick_s: float = 2.0
    cursor_ns: int | None = None
    sent: dict[tuple[int, int, str], tuple[float, float]] = field(default_factory=dict)
    judged: tuple[Any, ...] | None = None
    fingerprint: tuple[Any, ...] | None = None
    sizes: list[int] = field(default_factory=list)

    async def follow(self) -> None:
        while True:
            await self.update()
            await asyncio.sleep(self.tick_s)

    async def update(self) -> None:
        fp = await database_sync_to_async(self._fingerprint)()
        if fp == self.fingerprint:
            return
        msg = await database_sync_to_async(self._message)()
        self.fingerprint = fp
        if msg is not None:
            self.sizes.append(len(json.dumps(msg, separators=(",", ":"))))
            await self.send_text(msg)

    def _fingerprint(self) -> tuple[Any, ...]:
        n_blocks, top = blocks.fingerprint(self.run_id)
        state = Run.objects.filter(pk=self.run_id).values_list("state", flat=True).first()
        # counters keep arriving after a run's last event: its counters gate is judged again
        # every JUDGE_EVERY_S even when no event came
        return n_blocks, top, state, int(time.monotonic() // JUDGE_EVERY_S)

    def _message(self) -> dict[str, Any] | None:
        run = Run.objects.filter(pk=self.run_id, fabric=self.fabric).first()
        if run is None:
            return {"type": "error", "message": f"no run {self.run_id} on fabric {self.fabric!r}"}
        window = self.window_start_ns()
        since = window if self.cursor_ns is None else max(window, self.cursor_ns - MARKER_LOOKBACK_NS)
        data = phase_markers(run, since)
        reset = self.judged is None
        fresh = []
        for m in data["markers"]:
            key, span = (m["step"], m["layer"], m["phase"]), (m["start_ms"], m["end_ms"])
            if self.sent.get(key) != span:
                self.sent[key] = span
                fresh.append(m)
        if data["markers"]:
            self.cursor_ns = data["cursor_ns"]
        cut_ms = window / 1e6 - 60_000  # forget what slid out of the window (with a phase's margin)
        self.sent = {k: v for k, v in self.sent.items() if v[1] >= cut_ms}
        judged = (data["state"], data["verdict"], data["reason"],
                  json.dumps([data["clock"], data.get("counters")], sort_keys=True))
        if not reset and not fresh and judged == self.judged:
            return None
        self.judged = judged
        return {**data, "type": "markers", "markers": fresh, "reset": reset}
