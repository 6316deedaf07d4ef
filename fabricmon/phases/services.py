"""The verbs of the phase view: a run's views (projected, attributed, measured, gated) and the
phase markers the live heatmap draws.

Everything numeric happens in core; ``state`` reads rows and Redis frames into arrays, only the
new ones on each update.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectors.traces.schema import PHASES
from fabricmon.core.phases.clocks import estimate_skew
from fabricmon.core.phases.gates import clock_gate
from fabricmon.core.phases.routing import Routing
from fabricmon.jobs.models import Run
from fabricmon.phases import state

PXN = state.PXN


def phase_views(run: Run, routing: Routing = PXN, source: str | None = None) -> dict[str, Any]:
    """The run's phase-aligned views with their gate verdicts, as plain data for the API and page.

    Served from the run's incremental state (``state.RunPhaseState``): only event blocks,
    matrices and counter frames that arrived since the last answer are read and projected."""
    return phase_snapshot(run, routing, source).as_dict()


def phase_snapshot(run: Run, routing: Routing = PXN, source: str | None = None) -> state.PhaseSnapshot:
    """The same views with their arrays (what the run's WebSocket diffs between updates)."""
    return state.run_state(run, source).snapshot(run, routing)


def fold_layers(view: dict[str, Any]) -> dict[str, Any]:
    """Columns (step, layer, phase) → (layer, phase), summed over steps (for the folded heatmap)."""
    if view.get("values") is None or (view["columns"] and view["columns"][0][0] == -1):
        return view
    cols = [tuple(c[1:]) for c in view["columns"]]
    uniq = sorted(set(cols), key=lambda c: (c[0], c[1] != "dispatch", c[1]))
    idx = np.array([uniq.index(c) for c in cols])
    vals = np.asarray(view["values"])
    folded = np.zeros((len(uniq), vals.shape[1]))
    np.add.at(folded, idx, vals)
    return {
        **view,
        "columns": [[-1, *c] for c in uniq],
        "values": folded.tolist(),
        "hot_port": folded.argmax(axis=1).tolist(),
    }


# --- phase markers on the live fabric heatmap ------------------------------------------------------

RECENT_RUN_S = 6 * 3600  # a run ended this long ago is still offered beside the live heatmap
MAX_MARKERS = 5000  # per answer; the browser asks again from the newest marker it holds
_MAX_PHASE_NS = 60_000_000_000  # a block starting this long before since_ns may still end after it


def fabric_runs(fabric: str, recent_s: float = RECENT_RUN_S) -> list[dict[str, Any]]:
    """Runs on ``fabric`` that are running or ended within ``recent_s`` (newest first)."""
    from datetime import timedelta  # noqa: PLC0415

    from django.db.models import Q  # noqa: PLC0415
    from django.utils import timezone  # noqa: PLC0415

    cutoff = timezone.now() - timedelta(seconds=recent_s)
    runs = Run.objects.filter(fabric=fabric).filter(
        Q(state=Run.State.RUNNING) | Q(ended_at__gte=cutoff) | Q(started_at__gte=cutoff)
    )
    return [
        {"id": r.pk, "name": r.name, "state": r.state, "started_at": r.started_at.isoformat()}
        for r in runs.order_by("-started_at")[:50]
    ]


def phase_markers(run: Run, since_ns: int = 0) -> dict[str, Any]:
    """The run's (step, layer, phase) instances ending at or after ``since_ns``, as time-axis markers
    (median start/end across ranks, server clock), with the clock alignment and its gate.

    Event times were moved onto the server's clock at ingest (host time + the probe's exchanged
    offset), so markers line up with counter frames when the clock gate passes; when it does not,
    the answer says so and the page draws them flagged, never as if aligned. Only blocks that can
    hold such events are read (by their start_ns_max), so a poll costs the new span, not the run.
    """
    from fabricmon.jobs.columns import concat, decode_block  # noqa: PLC0415
    from fabricmon.jobs.models import EventBlock  # noqa: PLC0415

    blobs = (
        EventBlock.objects.filter(run=run, start_ns_max__gte=since_ns - _MAX_PHASE_NS)
        .order_by("start_ns_min", "id")
        .values_list("columns", flat=True)
    )
    cols = concat([decode_block(b) for b in blobs.iterator(chunk_size=64)])
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
    triples, inst = state.instances(step, layer, code)
    world = run.world_size or int(rank.max()) + 1
    offset_known = bool((cols.clock_offset_ns[ok] != 0).all())
    clock = estimate_skew(inst, rank, end, world, offset_known=offset_known)
    s_med = state.grouped_median(inst, start.astype(np.int64), len(triples))
    e_med = state.grouped_median(inst, end.astype(np.int64), len(triples))
    phase_s = float(np.median(e_med - s_med)) / 1e9
    gate = clock_gate(clock.error_bound_ns / 1e9, offset_known, max(phase_s, 1e-6))
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
    out |= {
        "clock": {
            "error_bound_ns": clock.error_bound_ns,
            "offset_known": offset_known,
            "worst_rank": clock.worst_rank(),
            "collectives": clock.collectives,
            "median_phase_s": phase_s,
        },
        "gate": gate.as_dict(),
        "verdict": gate.verdict,
        "reason": gate.reason,
        "cursor_ns": int(e_med[keep[-1]]) if len(keep) else since_ns,
    }
    return out
