"""A run's phase views over a WebSocket: a snapshot on connect, then deltas (``messages``).

:class:`PhaseStream` is everything the socket does, minus the socket. It wakes on a
``run.changed`` message from the channel layer (``notify_run_changed``, called after ingest
commits) *or* on its own tick, so a missed notification — another process, Redis hiccup, a
counter frame that changes the measured gates without any ingest — costs at most one tick.
Each wake asks the run's incremental state (``state.RunPhaseState``) for its snapshot; an
unchanged run answers from its fingerprint without reading anything. The stream diffs the new
snapshot against the last one the browser *acknowledged* and sends only the difference.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.db import transaction

from collectors.traces.schema import PHASES
from fabricmon.core.phases.assess import SourceView
from fabricmon.core.phases.gates import failing
from fabricmon.core.phases.routing import Routing
from fabricmon.jobs.models import Run
from fabricmon.phases.messages import PROTOCOL_VERSION, Delta, Snapshot, ViewMessage
from fabricmon.phases.state import PXN, PhaseSnapshot


def group_name(run_id: int) -> str:
    return f"phases.run.{int(run_id)}"


def notify_run_changed(run_id: int) -> None:
    """Tell the run's open sockets to look now (after the caller's transaction commits).

    The one line ingest calls after storing a batch; best effort — the sockets' tick covers a
    lost message, so a channel-layer failure never fails an ingest."""

    def send() -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        try:
            async_to_sync(layer.group_send)(group_name(run_id), {"type": "run.changed", "run": int(run_id)})
        except Exception:
            return

    transaction.on_commit(send)


# --- diffs (pure) --------------------------------------------------------------------------------
def _int_rows(a: Any) -> list[list[int]]:
    rows: list[list[int]] = np.rint(np.asarray(a, dtype=np.float64)).astype(np.int64).tolist()
    return rows


def _num(v: float) -> float | None:
    return float(v) if np.isfinite(v) else None


MAX_TIED_SENT = 8  # ports listed per ambiguous cell (counters alone can tie every port)


def hot_claims(hot: Any) -> list[dict[str, Any]]:
    """Per column of the attributed view: the hot port only where the counters vouch for it
    (``port``; None = ambiguous), the top and runner-up, the lead and its standard error, and the
    first of the ports it cannot be told from (``n_tied`` counts them all)."""
    out = []
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
            }
        )
    return out


def view_message(view: SourceView, mode: str = "full") -> ViewMessage:
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
        "values": _int_rows(view.load_bytes) if shown else None,
        "hot_port": d["hot_port"],
        "hot_claim": hot_claims(hot) if shown and hot is not None else None,
    }


def view_delta(old: SourceView | None, new: SourceView) -> ViewMessage | None:
    """What a client holding ``old`` needs to hold ``new``; None when nothing changed."""
    old_shown = old is not None and old.verdict != "withhold" and old.load_bytes is not None
    new_shown = new.verdict != "withhold" and new.load_bytes is not None
    if old is None or old_shown != new_shown:
        return view_message(new)
    judged = old.verdict != new.verdict or [g.as_dict() for g in old.gates] != [
        g.as_dict() for g in new.gates
    ]
    if not new_shown:
        return view_message(new) if judged or old.columns != new.columns else None
    where = {c: i for i, c in enumerate(old.columns)}
    if len(where) != len(old.columns) or any(c not in set(new.columns) for c in old.columns):
        return view_message(new)  # a column went away: replace
    idx = np.array([where.get(c, -1) for c in new.columns], dtype=np.int64)
    changed = idx < 0
    kept = np.flatnonzero(~changed)
    if len(kept):
        changed[kept] = np.any(np.rint(old.load_bytes[idx[kept]]) != np.rint(new.load_bytes[kept]), axis=1)
    claims = hot_claims(new.hot) if new.hot is not None else None
    if claims is not None:  # a column whose claim changed (e.g. ambiguous → claimed) goes too
        was = hot_claims(old.hot) if old.hot is not None else [None] * len(old.columns)
        changed[kept] |= np.array([was[idx[i]] != claims[i] for i in kept], dtype=bool)
    rows = np.flatnonzero(changed)
    if not len(rows) and not judged:
        return None
    part = new.load_bytes[rows]
    return {
        "mode": "upsert",
        "source": new.source,
        "basis": new.basis or None,
        "verdict": new.verdict,
        "gates": [g.as_dict() for g in new.gates],
        "failed": [g.reason for g in failing(new.gates)],
        "columns": [list(new.columns[i]) for i in rows],
        "values": _int_rows(part),
        "hot_port": part.argmax(axis=1).tolist() if part.size else [],
        "hot_claim": [claims[i] for i in rows] if claims is not None else None,
    }


def snapshot_message(snap: PhaseSnapshot, seq: int, routing: Routing) -> Snapshot:
    return {
        "type": "snapshot",
        "protocol": PROTOCOL_VERSION,
        "seq": seq,
        "run": int(snap.meta.get("run", 0)),
        "state": snap.state,
        "routing": routing.label(),
        "error": snap.error,
        "meta": {**{k: v for k, v in snap.meta.items() if k != "run"}, "phases": list(PHASES)},
        "views": {name: view_message(v) for name, v in snap.views.items()},
        "last": True,  # split_message sets it per part
    }


def delta_message(old: PhaseSnapshot, new: PhaseSnapshot, seq: int) -> Delta | None:
    """The difference between two snapshots of one run and routing; None when there is none."""
    views: dict[str, ViewMessage] = {}
    for name, view in new.views.items():
        d = view_delta(old.views.get(name), view)
        if d is not None:
            views[name] = d
    out: Delta = {"type": "delta", "seq": seq}
    if views:
        out["views"] = views
    meta = {k: v for k, v in new.meta.items() if k != "run" and old.meta.get(k) != v}
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


# --- one browser's stream ------------------------------------------------------------------------
@dataclass
class PhaseStream:
    """One browser's view of one run: snapshot on start, then deltas as the run changes."""

    run_id: int
    send_text: Callable[[dict[str, Any]], Awaitable[None]]
    routing: Routing = PXN
    tick_s: float = 2.0  # the consumer passes settings.FABRICMON_PHASES_TICK_S
    # at most one recompute per this many seconds per socket: a job posting 20 batches in a burst
    # nudges 20 times, and each recompute gates the whole run (~0.1-0.2 s at 256 GPUs); the nudges
    # that land meanwhile are coalesced into the next delta
    min_gap_s: float = 1.0
    seq: int = 0
    acked: int = 0
    sent: PhaseSnapshot | None = None  # what the browser holds once it acknowledges ``seq``
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    sizes: list[int] = field(default_factory=list)  # bytes of every message sent (tests, bench)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def _compute(self) -> PhaseSnapshot:
        snap: PhaseSnapshot = await database_sync_to_async(_snapshot_of)(self.run_id, self.routing)
        return snap

    async def _send(self, msg: dict[str, Any]) -> None:
        text = json.dumps(msg, separators=(",", ":"))
        self.sizes.append(len(text.encode()))
        await self.send_text(msg)

    async def _send_parts(self, msg: dict[str, Any]) -> None:
        """One message, or several under Daphne's size limit, each with its own ``seq``."""
        for part in split_message(msg):
            self.seq += 1
            part["seq"] = self.seq
            await self._send(part)

    async def snapshot(self) -> None:
        snap = await self._compute()
        self.sent = snap
        await self._send_parts(dict(snapshot_message(snap, self.seq + 1, self.routing)))
        self.acked = self.seq - 1  # the snapshot's last part needs its ack before deltas flow

    async def follow(self) -> None:
        """Forever: wait for a nudge or the tick, send what changed when the client has room."""
        loop = asyncio.get_running_loop()
        async with self._lock:
            await self.snapshot()
        last = loop.time()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout=self.tick_s)
            if (rest := self.min_gap_s - (loop.time() - last)) > 0:
                await asyncio.sleep(rest)
            self.wake.clear()
            last = loop.time()
            async with self._lock:
                await self._flush()

    async def _flush(self) -> None:
        if self.sent is None or self.seq != self.acked:
            return  # the client is behind: the change waits and goes out as one delta
        snap = await self._compute()
        if snap is self.sent:  # unchanged fingerprint: the state answered with the same object
            return
        msg = delta_message(self.sent, snap, self.seq + 1)
        self.sent = snap
        if msg is None:
            return
        await self._send_parts(dict(msg))

    async def on_ack(self, seq: int) -> None:
        async with self._lock:
            if self.acked < seq <= self.seq:
                self.acked = seq
        self.wake.set()  # anything that waited for room goes now

    async def on_subscribe(self, routing: Routing) -> None:
        async with self._lock:
            self.routing = routing
            await self.snapshot()


def _snapshot_of(run_id: int, routing: Routing) -> PhaseSnapshot:
    from fabricmon.phases import services  # noqa: PLC0415  (services imports this module's peers)

    run = Run.objects.get(pk=run_id)
    return services.phase_snapshot(run, routing)


# --- phase markers on the live fabric heatmap ----------------------------------------------------
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
        from django.db.models import Count, Max  # noqa: PLC0415

        from fabricmon.jobs.models import EventBlock  # noqa: PLC0415

        blocks = EventBlock.objects.filter(run_id=self.run_id).aggregate(n=Count("id"), top=Max("id"))
        state = Run.objects.filter(pk=self.run_id).values_list("state", flat=True).first()
        return blocks["n"], blocks["top"], state

    def _message(self) -> dict[str, Any] | None:
        from fabricmon.phases.services import phase_markers  # noqa: PLC0415

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
        judged = (data["state"], data["verdict"], data["reason"], json.dumps(data["clock"], sort_keys=True))
        if not reset and not fresh and judged == self.judged:
            return None
        self.judged = judged
        return {**data, "type": "markers", "markers": fresh, "reset": reset}
