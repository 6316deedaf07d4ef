"""The verbs of the phase view: gather a run's rank map, matrices, phase events and the fabric's
measured counters, then let ``fabricmon.core`` project, attribute and gate them.

Everything numeric happens in core; this module only reads rows and Redis frames into arrays.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from collectors.traces.schema import PHASES
from fabricmon.core.clocks import estimate_skew
from fabricmon.core.gates import SourceView, assess, clock_gate
from fabricmon.core.projection import FabricLayout, ProjectorCache, Routing, place_ranks
from fabricmon.jobs import services as jobs
from fabricmon.jobs.models import RankMapEntry, Run, TrafficMatrix
from fabricmon.topology import services as topology

_CACHE = ProjectorCache()
PXN = Routing("pxn")  # what rail-optimized fabrics run; the API may ask for another
_LAYOUTS: dict[tuple[str, str], FabricLayout] = {}


def _layout(fabric: str) -> FabricLayout:
    index = topology.port_index(fabric)
    key = (fabric, index.version)
    if key not in _LAYOUTS:
        _LAYOUTS[key] = FabricLayout.from_spec(topology.fabric_spec(fabric), index)
    return _LAYOUTS[key]


def _measured(fabric: str, t1_ns: int, t2_ns: int) -> tuple[Any, Any, Any] | None:
    """(edges, in bytes, out bytes) per poll interval from the live window, or None."""
    try:
        from fabricmon.telemetry import live_window  # noqa: PLC0415

        r = live_window.connect()
        frames = [f for _, f in live_window.read_window(r, fabric)]
    except Exception:
        return None
    frames = [
        f for f in frames if t1_ns <= f.ts_ns <= t2_ns and "in_bps" in f.metrics and "out_bps" in f.metrics
    ]
    if len(frames) < 3:
        return None
    ts = np.array([f.ts_ns for f in frames], dtype=np.int64)
    edges = np.concatenate([[ts[0] - int(frames[0].interval_s * 1e9)], ts])
    dt = np.diff(edges) / 1e9
    m_in = np.stack([np.asarray(f.metrics["in_bps"], dtype=np.float64) for f in frames]) / 8 * dt[:, None]
    m_out = np.stack([np.asarray(f.metrics["out_bps"], dtype=np.float64) for f in frames]) / 8 * dt[:, None]
    return edges, m_in, m_out


def phase_views(run: Run, routing: Routing = PXN, source: str | None = None) -> dict[str, Any]:
    """The run's phase-aligned views with their gate verdicts, as plain data for the API and page."""
    if not run.fabric:
        return {"error": "the run names no fabric: set it when creating the run", "views": {}}
    layout = _layout(run.fabric)
    matrices = TrafficMatrix.objects.filter(run=run).exclude(step=-1).exclude(layer=-1)
    if source:
        matrices = matrices.filter(source=source)
    rows = list(matrices.order_by("step", "layer", "phase"))
    if not rows:
        return {"error": "no per-(step, layer, phase) traffic matrices for this run yet", "views": {}}
    world = run.world_size or max(m.n_ranks for m in rows)
    entries = list(
        RankMapEntry.objects.filter(run=run).values("rank", "host", "local_rank", "switch", "switch_port")
    )
    placement = place_ranks(layout, entries, world)
    proj = _CACHE.get(layout, placement, routing)
    cols = jobs.event_columns(run, source=source)
    ok = (cols.step >= 0) & (cols.layer >= 0)  # -1: an event without a step or layer
    if not ok.any():
        return {"error": "no phase events with step and layer for this run yet", "views": {}}
    step, layer, code = cols.step[ok], cols.layer[ok], cols.phase[ok]
    rank, start, end = cols.rank[ok], cols.start_ns[ok], cols.end_ns[ok]
    # one instance id per (step, layer, phase), vectorised: unique rows of the three int columns
    triples, inst = np.unique(np.stack([step, layer, code], axis=1), axis=0, return_inverse=True)
    inst = inst.reshape(-1)
    key_of = {(int(s), int(lay), PHASES[int(c)]): i for i, (s, lay, c) in enumerate(triples)}
    clock = estimate_skew(inst, rank, end, world, offset_known=bool((cols.clock_offset_ns[ok] != 0).all()))
    order = np.argsort(inst, kind="stable")
    bounds = np.searchsorted(inst[order], np.arange(len(key_of) + 1))
    s_med = np.array([np.median(start[order[a:b]]) for a, b in itertools.pairwise(bounds)]).astype(np.int64)
    e_med = np.array([np.median(end[order[a:b]]) for a, b in itertools.pairwise(bounds)]).astype(np.int64)
    by_key = {(m.step, m.layer, m.phase): m for m in rows}
    keys = [k for k in key_of if k in by_key]
    pick = np.array([key_of[k] for k in keys], dtype=np.int64)
    stack = np.zeros((len(keys), world, world), dtype=np.float32)  # half the bytes; ~6e-8 relative
    for i, k in enumerate(keys):
        a = by_key[k].sent_array()
        stack[i, : a.shape[0], : a.shape[1]] = a[:world, :world]
    pb = proj.project(stack)
    meas = _measured(run.fabric, int(s_med.min()), int(e_med.max()) + 60_000_000_000)
    views: dict[str, SourceView] = assess(
        phase_keys=keys,
        start_ns=s_med[pick],
        end_ns=e_med[pick],
        projected_in=pb.in_bytes,
        projected_out=pb.out_bytes,
        coverage=placement.coverage,
        clock_error_s=clock.error_bound_ns / 1e9,
        offset_known=clock.offset_known,
        edges_ns=meas[0] if meas else None,
        measured_in=meas[1] if meas else None,
        measured_out=meas[2] if meas else None,
    )
    index = layout.index
    peers = topology.port_peers(run.fabric)
    rows_meta = [
        {
            "switch": index.switch_names[int(index.switch_of[p])],
            "port": index.port_names[p],
            "rail": int(index.rail[p]),
            "peer": peers[p] if p < len(peers) else "",
        }
        for p in range(len(index))
    ]
    return {
        "run": run.pk,
        "fabric": run.fabric,
        "routing": routing.label(),
        "rank_map": {"coverage": placement.coverage, "problems": list(placement.problems[:20])},
        "clock": {
            "error_bound_ns": clock.error_bound_ns,
            "worst_rank": clock.worst_rank(),
            "collectives": clock.collectives,
        },
        "ports": rows_meta,
        "views": {name: v.as_dict() for name, v in views.items()},
    }


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
    triples, inst = np.unique(np.stack([step, layer, code], axis=1), axis=0, return_inverse=True)
    inst = inst.reshape(-1)
    world = run.world_size or int(rank.max()) + 1
    offset_known = bool((cols.clock_offset_ns[ok] != 0).all())
    clock = estimate_skew(inst, rank, end, world, offset_known=offset_known)
    order = np.argsort(inst, kind="stable")
    bounds = np.searchsorted(inst[order], np.arange(len(triples) + 1))
    s_med = np.array([np.median(start[order[a:b]]) for a, b in itertools.pairwise(bounds)]).astype(np.int64)
    e_med = np.array([np.median(end[order[a:b]]) for a, b in itertools.pairwise(bounds)]).astype(np.int64)
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
