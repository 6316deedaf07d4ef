"""A run's report and the side-by-side comparison of two runs, as plain data for the templates.

Read through the owners only::

    jobs      the run, its tags and rank map (``RankMapEntry``, ``rank_maps.check``), its events'
              byte counts (``jobs/blocks.py``), which (layer, phase) keys a step has
    phases    the phase views of a window of steps with their gates (``phases.services.phase_snapshot``)
    alerts    alerts and episodes whose culprit names the run (``attribution.run_id``)

Bounded for any run: the heatmap covers the newest steps of the phase views' window that fit
``FABRICMON_REPORT_MAX_COLUMNS`` columns and at most ``FABRICMON_REPORT_MAX_PORTS`` ports; the
rank table, alerts and episodes are capped too, and the page says every bound it applied. The
whole run's per-port bytes are the streamed exports (``exports.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from collectors.traces.schema import PHASES
from fabricmon.alerts.models import Alert, Episode
from fabricmon.core.phases.assess import SourceView, json_rows
from fabricmon.core.phases.routing import Routing
from fabricmon.core.reports.summary import bytes_by_key, hottest, port_totals, report_rows, steps_that_fit
from fabricmon.jobs import blocks, rank_maps
from fabricmon.jobs.models import RankMapEntry, Run, TrafficMatrix
from fabricmon.phases import services as phase_services
from fabricmon.phases.state import StepWindow, default_window_steps

PXN = phase_services.PXN
MAX_RANK_ROWS = 1024  # ranks listed in the placement table (the summary counts them all)
MAX_ALERTS = 100  # newest alerts listed (the count is whole)
MAX_EPISODES = 50
HOTTEST = 10  # hottest ports listed
EXACT_VIEWS = ("projected", "measured")  # the views with one column per (step, layer, phase)


def port_label(row: dict[str, Any]) -> str:
    """A port as the phase page names it: ``switch:port`` and what it faces (a host's GPU, or the
    switch port at the other end of an uplink)."""
    peer = str(row.get("peer") or "").strip()
    where = f"{row.get('switch')}:{row.get('port')}"
    parts = peer.split()
    if len(parts) >= 2 and parts[1].startswith("gpu"):
        return f"{where} · {parts[0]} {parts[1]}"
    return f"{where} ↔ {peer}" if peer else where


def column_label(col: tuple[int, int, str] | list[Any]) -> str:
    step, layer, phase = col
    return f"s{step} L{layer} {phase}" if step >= 0 else f"L{layer} {phase}"


# -- the run -------------------------------------------------------------------------------------------


def run_facts(run: Run) -> dict[str, Any]:
    return {
        "id": run.pk,
        "name": run.name,
        "owner": str(run.owner),
        "state": run.state,
        "fabric": run.fabric,
        "world_size": run.world_size,
        "tags": list(run.tags) if isinstance(run.tags, list) else [],
        "started_at": run.started_at,
        "ended_at": run.ended_at,
        "events": blocks.event_count(run),
        "probe_dropped": run.probe_dropped_total,
    }


def placement(run: Run, limit: int = MAX_RANK_ROWS) -> dict[str, Any]:
    """Rank → host, GPU, NIC and leaf port from the rank map, with what the fabric makes of it."""
    check = rank_maps.check(run)
    qs = RankMapEntry.objects.filter(run=run).order_by("rank")
    total = qs.count()
    rows = list(qs.values("rank", "host", "local_rank", "gpu", "nic", "switch", "switch_port")[:limit])
    plain = qs.order_by()  # no ordering column in a DISTINCT (it would repeat each value per rank)
    hosts = plain.values("host").distinct().count()
    leaves = sorted(plain.exclude(switch="").values_list("switch", flat=True).distinct()[:200])
    return {
        "summary": check["summary"],
        "coverage": check.get("coverage", 0.0),
        "world_size": check["world_size"],
        "missing": check["missing"],
        "unplaced": check.get("unplaced", [])[:20],
        "ranks": rows,
        "ranks_total": total,
        "hosts": hosts,
        "leaves": leaves,
    }


def run_alerts(run: Run, limit: int = MAX_ALERTS) -> dict[str, Any]:
    """Alerts and episodes whose culprit names this run (their own, or their episode's)."""
    named = Q(attribution__run_id=run.pk) | Q(episode__attribution__run_id=run.pk)
    alerts = Alert.objects.filter(named).select_related("episode").order_by("-active_since")
    ep_named = Q(attribution__run_id=run.pk) | Q(alerts__attribution__run_id=run.pk)
    episodes = Episode.objects.filter(ep_named).distinct().order_by("-opened_at")
    return {
        "count": alerts.count(),
        "alerts": [
            {
                "kind": a.get_kind_display(),
                "key": a.key,
                "state": a.state,
                "fired_at": a.fired_at,
                "resolved_at": a.resolved_at,
                "summary": a.summary,
                "culprit": a.attribution_line,
                "episode": a.episode_id,
            }
            for a in alerts[:limit]
        ],
        "episodes_count": episodes.count(),
        "episodes": [
            {
                "id": e.pk,
                "family": e.family,
                "kinds": list(e.kinds),
                "opened_at": e.opened_at,
                "closed_at": e.closed_at,
                "migrations": e.migrations,
                "trajectory_steps": len(e.trajectory),
                "culprit": e.attribution_line,
            }
            for e in episodes[:MAX_EPISODES]
        ],
        "limit": limit,
    }


# -- the phase views, bounded -------------------------------------------------------------------------


@dataclass(frozen=True)
class Bounds:
    max_columns: int
    max_ports: int
    window_steps: int  # the phase views' window

    @classmethod
    def from_settings(cls) -> Bounds:
        return cls(int(settings.FABRICMON_REPORT_MAX_COLUMNS), int(settings.FABRICMON_REPORT_MAX_PORTS),
                   default_window_steps())


def _keys_per_step(run: Run) -> int:
    """(layer, phase) keys a step of the run has (from its newest few steps' matrices: an index read)."""
    newest = blocks.newest_steps(run, 4)
    if not newest:
        return 0
    per = TrafficMatrix.objects.filter(run=run, step__in=newest, layer__gte=0)
    per = per.values_list("step", "layer", "phase")
    counts: dict[int, int] = {}
    for step, _layer, _phase in per.distinct():
        counts[step] = counts.get(step, 0) + 1
    return max(counts.values(), default=0)


def _gates(views: dict[str, SourceView]) -> list[dict[str, Any]]:
    out = []
    for name in ("projected", "attributed", "measured"):
        v = views.get(name)
        if v is None:
            continue
        d = v.as_dict(with_values=False)
        out.append({"view": name, "verdict": v.verdict, "basis": v.basis, "failed": d["failed"],
                    "gates": d["gates"]})
    return out


def _totals(run: Run, lo: int, hi: int) -> list[dict[str, Any]]:
    """Bytes the ranks reported sending per (layer, phase) over steps [lo, hi] (their events'
    own counts; the blocks holding those steps, per-peer arrays not read)."""
    parts: dict[str, list[np.ndarray]] = {"step": [], "layer": [], "phase": [], "bytes_sent": []}
    ids = sorted(blocks.block_ids(run, min_step=lo, max_step=hi))
    for _, cols in blocks.read_block_fields(ids, tuple(parts)):
        ok = (cols["step"] >= lo) & (cols["step"] <= hi)
        for f, kept in parts.items():
            kept.append(cols[f][ok])
    if not ids:
        return []
    cat = {f: np.concatenate(p) for f, p in parts.items()}
    return [{"layer": lay, "phase": ph, "bytes": b}
            for lay, ph, b in bytes_by_key(cat["layer"], cat["phase"], cat["bytes_sent"], PHASES)]


def phase_section(run: Run, routing: Routing = PXN, bounds: Bounds | None = None) -> dict[str, Any]:
    """The run's phase-aligned heatmap, hot-port trajectory, hottest ports, per-(layer, phase)
    totals and every view's gates, over the newest steps that fit the bounds."""
    b = bounds or Bounds.from_settings()
    count = steps_that_fit(_keys_per_step(run), b.max_columns, b.window_steps)
    snap = phase_services.phase_snapshot(run, routing, window=StepWindow(count=count))
    out: dict[str, Any] = {"error": snap.error, "routing": routing.label(), "gates": [], "view": None,
                           "bounds": {"max_columns": b.max_columns, "max_ports": b.max_ports,
                                      "window_steps": b.window_steps, "steps_asked": count}}
    if snap.error is not None:
        return out
    meta = snap.meta
    ports_meta: list[dict[str, Any]] = meta["ports"]
    out["gates"] = _gates(snap.views)
    out["window"] = meta["window"]
    out["clock"] = meta.get("clock")
    lo, hi = meta["window"]["steps"]
    out["totals"] = _totals(run, lo, hi)
    name = next((n for n in EXACT_VIEWS if n in snap.views and snap.views[n].verdict != "withhold"
                 and snap.views[n].load_bytes is not None), None)
    if name is None:
        return out
    view = snap.views[name]
    load = np.asarray(view.load_bytes, dtype=np.float64)
    cols = list(view.columns)
    cut = max(0, len(cols) - b.max_columns)  # one step with more keys than the bound: its newest columns
    load, cols = load[cut:], cols[cut:]
    hot = view.hot
    top = np.asarray(hot.port[cut:] if hot is not None else np.nanargmax(np.nan_to_num(load, nan=-1), axis=1))
    run_ports = np.asarray(meta.get("run_ports") or range(load.shape[1]), dtype=np.int64)
    rows = report_rows(load, run_ports, top, b.max_ports)
    totals = port_totals(load)
    label = {int(p): port_label(ports_meta[int(p)]) for p in
             np.union1d(np.union1d(rows, top), hottest(totals, run_ports, HOTTEST)).tolist()}
    if hot is not None:
        runners = np.unique(hot.runner_up[cut:]).tolist()
        label.update({int(p): port_label(ports_meta[int(p)]) for p in runners})
    out["view"] = name
    out["verdict"] = view.verdict
    out["heatmap"] = {
        "columns": [column_label(c) for c in cols],
        "rows": [label[int(p)] for p in rows],
        "row_ports": rows.tolist(),
        "z": json_rows(load[:, rows].T, whole=True),
        "ports_total": len(run_ports),
    }
    out["trajectory"] = _trajectory(cols, load, hot, cut, top=top, label=label)
    out["hottest"] = [{"port": label[int(p)], "port_index": int(p), "bytes": _num(totals[int(p)])}
                      for p in hottest(totals, run_ports, HOTTEST).tolist()]
    return out


def _num(v: float) -> int | None:
    return round(float(v)) if np.isfinite(v) else None


def _trajectory(cols: list[Any], load: np.ndarray, hot: Any, cut: int, *, top: np.ndarray,
                label: dict[int, str]) -> list[dict[str, Any]]:
    """Per column: the hottest port, its bytes, its lead over the runner-up (the margin) and
    whether that lead makes it a claim (else ambiguous), with its direction."""
    out = []
    for i, c in enumerate(cols):
        p = int(top[i])
        k = i + cut
        lead = float(hot.lead_rel[k]) if hot is not None else float("nan")
        out.append({
            "column": column_label(c),
            "step": int(c[0]), "layer": int(c[1]), "phase": str(c[2]),
            "port": label[p],
            "port_index": p,
            "bytes": _num(load[i, p]),
            "lead_rel": lead if np.isfinite(lead) else None,
            "lead_text": f"{100 * lead:.1f} %" if np.isfinite(lead) else "unknown",
            "claimed": bool(hot.claimed[k]) if hot is not None else False,
            "runner_up": label.get(int(hot.runner_up[k]), "") if hot is not None else "",
            "dir": hot.dir_label(k) if hot is not None else "",
        })
    return out


# -- the report and the comparison ------------------------------------------------------------------


def run_report(run: Run, routing: Routing = PXN) -> dict[str, Any]:
    """Everything one run's report shows."""
    return {
        "run": run_facts(run),
        "placement": placement(run),
        "phases": phase_section(run, routing),
        "alerts": run_alerts(run),
        "generated_at": timezone.now(),
    }


CHART_KEYS = ("view", "verdict", "routing", "window", "heatmap", "trajectory", "totals")


def chart_data(report: dict[str, Any]) -> dict[str, Any]:
    """What the charts draw (the JSON in the page): the run's id and name, and its phase data."""
    ph = report["phases"]
    return {"run": {"id": report["run"]["id"], "name": report["run"]["name"]},
            "phases": {k: ph.get(k) for k in CHART_KEYS}}


def compare(a: Run, b: Run, routing: Routing = PXN) -> dict[str, Any]:
    """Two runs side by side: facts, placement summary, per-(layer, phase) totals, hottest ports,
    gates, alert counts and their heatmaps (one colour range for both)."""
    sides = []
    for run in (a, b):
        place = placement(run, limit=0)
        alerts = run_alerts(run, limit=0)
        sides.append({"run": run_facts(run), "placement": place, "phases": phase_section(run, routing),
                      "alerts": {"count": alerts["count"], "episodes_count": alerts["episodes_count"]}})
    keys = sorted({(t["layer"], t["phase"]) for s in sides for t in s["phases"].get("totals", [])},
                  key=lambda k: (k[0], PHASES.index(k[1]) if k[1] in PHASES else len(PHASES)))
    by = [{(t["layer"], t["phase"]): t["bytes"] for t in s["phases"].get("totals", [])} for s in sides]
    totals = [{"layer": k[0], "phase": k[1], "a": by[0].get(k), "b": by[1].get(k)} for k in keys]
    return {"a": sides[0], "b": sides[1], "totals": totals, "generated_at": timezone.now()}
