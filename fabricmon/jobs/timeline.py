"""A run's timeline as the run page draws it: ranks × time, aggregated on the server so the answer
is bounded by the screen, never by the run's length.

For a span [t1, t2] (default: the whole run) cut into ``buckets`` equal time buckets and the
run's ranks grouped into at most ``max_rows`` rows::

    busy[row, b]   = Σ over events of the row's ranks of |event ∩ bucket b| / (|bucket| · ranks in row)
    phase[row, b]  = the phase with the most busy time in that cell (255: idle)

Both are u8 (busy × 254, rounded up so any activity shows), sent base64: a 256 × 600 answer is
~400 KB whatever the run holds. When the span holds at most ``EXACT_LIMIT`` events, the events
themselves come too, so zooming in ends at the real bars.

Only the blocks whose start times come near the span are read, and only their rank, phase, time
and step/layer columns are decoded (``columns.decode_fields``), so the whole-run view of a run of
1 M events costs one pass over its blocks' small columns (``bench/run_timeline.py``).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import numpy as np

from collectors.traces.schema import PHASES, SOURCES
from fabricmon.jobs import blocks
from fabricmon.jobs.models import Run

DEFAULT_BUCKETS = 600
MAX_BUCKETS = 2000
DEFAULT_ROWS = 256
MAX_ROWS = 1024
EXACT_LIMIT = 3000  # a span with at most this many events also gets its events as bars
IDLE = 255
FIELDS = ("rank", "phase", "source", "start_ns", "end_ns", "step", "layer")


@dataclass(frozen=True)
class TimelineQuery:
    """What the page asks for; every bound checked before anything is read."""

    t1_ns: int | None = None
    t2_ns: int | None = None
    buckets: int = DEFAULT_BUCKETS
    max_rows: int = DEFAULT_ROWS
    source: str | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.buckets <= MAX_BUCKETS:
            raise ValueError(f"buckets must be within 1..{MAX_BUCKETS} (got {self.buckets})")
        if not 1 <= self.max_rows <= MAX_ROWS:
            raise ValueError(f"rows must be within 1..{MAX_ROWS} (got {self.max_rows})")
        if self.t1_ns is not None and self.t2_ns is not None and self.t2_ns <= self.t1_ns:
            raise ValueError("t2_ns must be greater than t1_ns")
        if self.source is not None and self.source not in SOURCES:
            raise ValueError(f"unknown source {self.source!r} (one of {', '.join(SOURCES)})")


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a, dtype=np.uint8).tobytes()).decode()


def ranks_by_time(run: Run, q: TimelineQuery) -> dict[str, Any]:
    """The aggregated timeline of ``run`` over the asked span (see the module doc)."""
    span = blocks.time_span(run)
    if span is None:
        return {"empty": True, "events": 0, "reason": "no events yet"}
    t1 = q.t1_ns if q.t1_ns is not None else span[0]
    t2 = q.t2_ns if q.t2_ns is not None else max(span[1], t1 + 1)
    cols = blocks.fields_near(run, t1, t2, FIELDS)
    live = (cols["end_ns"] >= t1) & (cols["start_ns"] <= t2)
    if q.source is not None:
        live &= cols["source"] == SOURCES.index(q.source)
    sel = {k: v[live] for k, v in cols.items()}
    world = max(run.world_size or 0, int(sel["rank"].max()) + 1 if len(sel["rank"]) else 1)
    per_row = -(-world // q.max_rows)  # ceil: ranks per row
    rows = -(-world // per_row)
    busy, phase = _cells(sel, (t1, t2), q.buckets, per_row, world)
    out: dict[str, Any] = {
        "empty": False,
        "run_span_ns": list(span),
        "t1_ns": t1,
        "t2_ns": t2,
        "buckets": q.buckets,
        "rows": rows,
        "ranks_per_row": per_row,
        "world_size": world,
        "events": int(live.sum()),
        "phases": list(PHASES),
        "busy": _b64(busy),
        "phase": _b64(phase),
    }
    if out["events"] <= EXACT_LIMIT:
        out["exact"] = {
            "rank": sel["rank"].tolist(),
            "phase": sel["phase"].tolist(),
            "start_ns": sel["start_ns"].tolist(),
            "end_ns": sel["end_ns"].tolist(),
            "step": sel["step"].tolist(),
            "layer": sel["layer"].tolist(),
        }
    return out


def _cells(
    sel: dict[str, np.ndarray], span: tuple[int, int], buckets: int, per_row: int, world: int
) -> tuple[np.ndarray, np.ndarray]:
    """Busy share and dominant phase per (row, bucket), u8. An event is split over every bucket it
    overlaps (np.repeat over its bucket span), so a long collective paints its whole length."""
    t1, t2 = span
    rows = -(-world // per_row)
    ranks_in_row = np.minimum(per_row, world - np.arange(rows) * per_row)  # the last row may hold fewer
    width = (t2 - t1) / buckets
    start = np.clip(sel["start_ns"], t1, t2).astype(np.float64) - t1
    end = np.clip(sel["end_ns"], t1, t2).astype(np.float64) - t1
    b0 = np.minimum((start // width).astype(np.int64), buckets - 1)
    b1 = np.minimum((np.maximum(end - 1e-9, start) // width).astype(np.int64), buckets - 1)
    n = b1 - b0 + 1
    ev = np.repeat(np.arange(len(b0)), n)
    b = np.repeat(b0, n) + (np.arange(len(ev)) - np.repeat(np.cumsum(n) - n, n))
    lo = np.maximum(start[ev], b * width)
    hi = np.minimum(end[ev], (b + 1) * width)
    dur = np.maximum(hi - lo, 0.0)
    row = sel["rank"][ev] // per_row
    n_phases = len(PHASES)
    cell = row * buckets + b
    by_phase = np.bincount(cell * n_phases + sel["phase"][ev], weights=dur,
                           minlength=rows * buckets * n_phases).reshape(rows * buckets, n_phases)
    total = by_phase.sum(axis=1)
    share = np.minimum(total / (width * np.repeat(ranks_in_row, buckets)), 1.0)
    busy = np.where(total > 0, np.maximum(np.ceil(share * 254), 1), 0).astype(np.uint8)
    phase = np.where(total > 0, by_phase.argmax(axis=1), IDLE).astype(np.uint8)
    return busy.reshape(rows, buckets), phase.reshape(rows, buckets)
