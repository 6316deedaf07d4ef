"""The phase socket's messages as pure functions of snapshots: a view whole, the difference between
two snapshots of a run, and a big message split under Daphne's 1 MiB limit (``messages.py``
declares the shapes).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from collectors.traces.schema import PHASES
from fabricmon.core.phases.assess import SourceView, hot_ports, json_rows, take_rows
from fabricmon.core.phases.gates import failing
from fabricmon.core.phases.routing import Routing
from fabricmon.phases.messages import PROTOCOL_VERSION, Delta, Snapshot, ViewMessage
from fabricmon.phases.state import PhaseSnapshot


# --- diffs (pure) --------------------------------------------------------------------------------
def _int_rows(a: Any) -> list[list[int | None]]:
    """Whole bytes per port; NaN (no data) is None on the wire, never a cast −9.2e18."""
    return json_rows(a, whole=True)  # type: ignore[return-value]


def _num(v: float) -> float | None:
    return float(v) if np.isfinite(v) else None


MAX_TIED_SENT = 8  # ports listed per ambiguous cell (counters alone can tie every port)


def hot_claims(hot: Any) -> list[dict[str, Any]]:
    """Per column of a view: the hot port only where it is decisive (``port``; None = ambiguous)
    — in the attributed view where the counters vouch for it (``basis`` "se": a lead beyond z
    standard errors), in the exact views where it leads by 10 % (``basis`` "margin") — the top
    and runner-up, the lead and its standard error (None for exact views), the top port's
    direction (``dir``: "out" the switch sends, "in" it receives, "in = out" a tie), and the
    first of the ports it cannot be told from (``n_tied`` counts them all)."""
    out = []
    basis = "se" if hot.z > 0 else "margin"
    for k in range(len(hot.port)):
        tied = np.flatnonzero(hot.tied[k])
        out.append(
            {
                "port": int(hot.port[k]) if hot.claimed[k] else None,
                "top": int(hot.port[k]),
                "runner_up": int(hot.runner_up[k]),
                "lead_rel": _num(hot.lead_rel[k]),
                "lead_se_rel": _num(hot.lead_se_rel[k]),
                "tied": tied[:MAX_TIED_SENT].tolist(),
                "n_tied": len(tied),
                "dir": hot.dir_label(k),
                "basis": basis,
            }
        )
    return out


def view_message(view: SourceView, mode: str = "full", rows: list[int] | None = None) -> ViewMessage:
    """A view whole; ``rows``: the port positions its values carry (the snapshot's ``shown_ports``)."""
    d = view.as_dict(with_values=False)
    shown = d["hot_port"] is not None
    hot = view.hot
    return {
        "mode": mode,  # type: ignore[typeddict-item]
        "source": view.source,
        "basis": view.basis or None,
        "verdict": view.verdict,
        "gates": d["gates"],
        "failed": d["failed"],
        "columns": d["columns"],
        "values": _int_rows(take_rows(view.load_bytes, rows)) if shown else None,
        "hot_port": d["hot_port"],
        "hot_claim": hot_claims(hot) if shown and hot is not None else None,
    }


def view_delta(old: SourceView | None, new: SourceView, rows: list[int] | None = None) -> ViewMessage | None:
    """What a client holding ``old`` needs to hold ``new``; None when nothing changed. ``rows``: the
    port positions both carry (a change of rows is a whole view: ``delta_message``)."""
    old_shown = old is not None and old.verdict != "withhold" and old.load_bytes is not None
    new_shown = new.verdict != "withhold" and new.load_bytes is not None
    if old is None or old_shown != new_shown:
        return view_message(new, rows=rows)
    judged = old.verdict != new.verdict or [g.as_dict() for g in old.gates] != [
        g.as_dict() for g in new.gates
    ]
    if not new_shown:
        return view_message(new, rows=rows) if judged or old.columns != new.columns else None
    where = {c: i for i, c in enumerate(old.columns)}
    if len(where) != len(old.columns):
        return view_message(new, rows=rows)
    # columns that slid out of the window are named, not resent: the client drops them
    now = set(new.columns)
    dropped = [list(c) for c in old.columns if c not in now]
    idx = np.array([where.get(c, -1) for c in new.columns], dtype=np.int64)
    changed = idx < 0
    kept = np.flatnonzero(~changed)
    if len(kept):  # (on the rows sent: a change elsewhere is nothing the client holds)
        a = np.rint(take_rows(old.load_bytes[idx[kept]], rows))
        b = np.rint(take_rows(new.load_bytes[kept], rows))
        changed[kept] = np.any((a != b) & ~(np.isnan(a) & np.isnan(b)), axis=1)  # no data = no data
    claims = hot_claims(new.hot) if new.hot is not None else None
    if claims is not None:  # a column whose claim changed (e.g. ambiguous → claimed) goes too
        was = hot_claims(old.hot) if old.hot is not None else [None] * len(old.columns)
        changed[kept] |= np.array([was[idx[i]] != claims[i] for i in kept], dtype=bool)
    changed_at = np.flatnonzero(changed)
    if not len(changed_at) and not judged and not dropped:
        return None
    part = take_rows(new.load_bytes[changed_at], rows)
    out: ViewMessage = {
        "mode": "upsert",
        "source": new.source,
        "basis": new.basis or None,
        "verdict": new.verdict,
        "gates": [g.as_dict() for g in new.gates],
        "failed": [g.reason for g in failing(new.gates)],
        "columns": [list(new.columns[i]) for i in changed_at],
        "values": _int_rows(part),
        # by port position, as in a whole view (the argmax over every port, not only the rows sent)
        "hot_port": hot_ports(new.load_bytes[changed_at]) if len(changed_at) else [],
        "hot_claim": [claims[i] for i in changed_at] if claims is not None else None,
    }
    if dropped:
        out["drop"] = dropped
    return out


def snapshot_message(snap: PhaseSnapshot, seq: int, routing: Routing) -> Snapshot:
    rows = snap.rows()
    return {
        "type": "snapshot",
        "protocol": PROTOCOL_VERSION,
        "seq": seq,
        "run": int(snap.meta.get("run", 0)),
        "state": snap.state,
        "routing": routing.label(),
        "error": snap.error,
        "meta": {**{k: v for k, v in snap.wire_meta(rows).items() if k != "run"}, "phases": list(PHASES)},
        "views": {name: view_message(v, rows=rows) for name, v in snap.views.items()},
        "last": True,  # split_message sets it per part
    }


def delta_message(old: PhaseSnapshot, new: PhaseSnapshot, seq: int) -> Delta | None:
    """The difference between two snapshots of one run and routing; None when there is none. When
    the rows sent changed (another port became hot, at a fabric larger than the rows), every view
    is sent whole over the new rows, with the new ``shown_ports`` and their labels."""
    rows, old_rows = new.rows(), old.rows()
    moved = rows != old_rows
    views: dict[str, ViewMessage] = {}
    for name, view in new.views.items():
        d = view_message(view, rows=rows) if moved else view_delta(old.views.get(name), view, rows)
        if d is not None:
            views[name] = d
    out: Delta = {"type": "delta", "seq": seq}
    if views:
        out["views"] = views
    old_meta = old.wire_meta(old_rows)
    meta = {k: v for k, v in new.wire_meta(rows).items() if k != "run" and old_meta.get(k) != v}
    if meta:
        out["meta"] = meta
    if new.state != old.state:
        out["state"] = new.state
    if new.error != old.error:
        out["error"] = new.error
    return out if len(out) > 2 else None


MESSAGE_BUDGET_BYTES = 512 * 1024  # Daphne refuses WebSocket messages over 1 MiB


def _size(obj: Any) -> int:
    return len(json.dumps(obj, separators=(",", ":")))


def split_message(msg: dict[str, Any], budget: int = MESSAGE_BUDGET_BYTES) -> list[dict[str, Any]]:
    """A snapshot or delta → itself (``last: true``) or itself carrying the first columns, then
    ``more`` messages with the rest as upserts, each ≲ ``budget`` bytes; the last has ``last: true``.
    The browser draws when the last part arrives."""
    views: dict[str, Any] = msg.get("views") or {}
    items = [(name, i) for name, v in views.items() if v.get("values") for i in range(len(v["columns"]))]
    if _size(msg) <= budget or not items:
        return [{**msg, "last": True}]
    per_column = ("columns", "values", "hot_port", "hot_claim")
    skeleton = {
        name: {**v, **{k: [] if v.get(k) is not None else None for k in per_column}}
        for name, v in views.items()
    }
    parts: list[dict[str, Any]] = [{**msg, "views": skeleton}]
    used = _size(parts[0])
    for name, i in items:
        v = views[name]
        cost = _size(v["columns"][i]) + _size(v["values"][i]) + 12
        if v.get("hot_claim") is not None:
            cost += _size(v["hot_claim"][i])
        if used + cost > budget and any(x["columns"] for x in parts[-1]["views"].values()):
            parts.append({"type": "more", "views": {}})
            used = _size(parts[-1])
        target = parts[-1]["views"].setdefault(
            name,
            {
                "mode": "upsert",
                "source": v["source"],
                "basis": v.get("basis"),
                "verdict": v["verdict"],
                "gates": v["gates"],
                "failed": v["failed"],
                **{k: [] if v.get(k) is not None else None for k in per_column},
            },
        )
        if not target["columns"] and len(parts) > 1:
            used += _size(target)
        for k in per_column:
            if v.get(k) is not None:
                target[k].append(v[k][i])
        used += cost
    for n, part in enumerate(parts):
        part["last"] = n == len(parts) - 1
    return parts
