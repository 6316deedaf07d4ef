"""The culprit of an alert on a hot port: the training run, rank, layer and phase behind it.

For an alert window [t1, t2] on a port ``switch:port`` of a fabric:

1. the runs on that fabric active during the window whose rank map puts a NIC on that port
   (only host-facing ports have one, so spine/uplink ports come out "unknown");
2. that rank's phase events whose [start_ns, end_ns] overlap the window;
3. the (layer, phase) in which the rank received the most bytes: its own ``bytes_recv`` where
   it reported them, else what its peers reported sending to it (``send_peer == rank``).

Only the event blocks near the window are decoded (``jobs.blocks.columns_near``). Event times are already
on the server's clock: ingest adds each event's ``clock_offset_ns``
(``jobs.ndjson``), so the window is compared with ``start_ns``/``end_ns`` as stored. All sums
are numpy over event columns (``np.unique`` + ``np.bincount``), no per-event Python loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, TypeVar

import numpy as np
from django.db.models import Q

from fabricmon.jobs import blocks
from fabricmon.jobs.columns import EventColumns
from fabricmon.jobs.models import PHASES, RankMapEntry

_T = TypeVar("_T")
UNKNOWN = "unknown"
# Why a known run's culprit names no (layer, phase): said on the alert, never left to a guess
NO_EVENTS = "no_events"  # the run reported no phase events for the alert's time (yet): a sampling job
RANK_SILENT = "rank_silent"  # it did, but none of this port's rank nor any sent to it
UNNAMED_WHY = {
    NO_EVENTS: "no events reported then",
    RANK_SILENT: "no event of its rank then",
}


@dataclass(frozen=True)
class Culprit:
    """Who was behind a hot port in an alert window; ``run_name == ""`` means unknown."""

    run_name: str = ""
    run_id: int | None = None
    rank: int | None = None
    host: str = ""
    gpu: str = ""
    layer: int | None = None  # None: the rank's events had no layer, or none overlapped
    phase: str = ""
    recv_bytes: int = 0
    phases: tuple[str, ...] = ()  # every "layer L phase" of the rank overlapping the window
    unnamed: str = ""  # NO_EVENTS | RANK_SILENT: why a known run's phase is not named

    @property
    def known(self) -> bool:
        return bool(self.run_name)

    @property
    def line(self) -> str:
        """One line for lists and chat: ``run X · layer L dispatch · rank R (node003 gpu2)``."""
        if not self.known:
            return UNKNOWN
        where = self.phase or "phase unknown" + (f" ({UNNAMED_WHY[self.unnamed]})" if self.unnamed else "")
        if self.layer is not None:
            where = f"layer {self.layer} {self.phase}"
        gpu = self.gpu if not self.gpu or self.gpu.lower().startswith("gpu") else f"gpu{self.gpu}"
        node = " ".join(v for v in (self.host, gpu) if v)
        rank = f"rank {self.rank}" + (f" ({node})" if node else "")
        return f"run {self.run_name} · {where} · {rank}"

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "phases": list(self.phases), "line": self.line}


def _ns(dt: datetime) -> int:
    return int(dt.timestamp() * 1e9)


def received_by_layer_phase(
    cols: EventColumns, rank: int, t1_ns: int, t2_ns: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bytes ``rank`` received per (layer, phase code) in events overlapping [t1, t2].

    Returns (layer, phase_code, bytes) arrays, one entry per pair seen, bytes descending."""
    live = (cols.start_ns <= t2_ns) & (cols.end_ns >= t1_ns)
    own = live & (cols.rank == rank)
    # What the rank says it received; where it gave no total (-1), what peers say they sent it.
    recv = np.where(own & (cols.bytes_recv > 0), cols.bytes_recv, 0)
    peer_ev = cols.peer_event_index("send")
    to_rank = (cols.send_peer == rank) & live[peer_ev] & (cols.rank[peer_ev] != rank)
    sent_to = np.bincount(peer_ev[to_rank], weights=cols.send_bytes[to_rank], minlength=len(cols))
    # Per (layer, phase): prefer the receiver's own report; fall back to peers' sends.
    key = cols.layer.astype(np.int64) * (len(PHASES) + 1) + cols.phase
    touched = own | (sent_to > 0)
    if not touched.any():
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    keys, inv = np.unique(key[touched], return_inverse=True)
    by_recv = np.bincount(inv, weights=recv[touched], minlength=len(keys))
    by_sent = np.bincount(inv, weights=sent_to[touched], minlength=len(keys))
    total = np.where(by_recv > 0, by_recv, by_sent).astype(np.int64)
    order = np.argsort(-total, kind="stable")
    keys, total = keys[order], total[order]
    return keys // (len(PHASES) + 1), keys % (len(PHASES) + 1), total


class EventCache:
    """Each run's events decoded once for the culprit look-ups of one evaluation, not once per alert.

    With tens of open alerts on a large job, every alert that looked again decoded the same blocks
    and asked the same block-index aggregate. A look-up inside the decoded time range reuses it
    (callers filter events by their own window); one outside it decodes the union of both ranges.
    Lives for one evaluation: events stored meanwhile are seen by the next."""

    def __init__(self) -> None:
        self._spans: dict[int, tuple[int, int] | None] = {}
        self._own: dict[int, tuple[int, int, dict[str, np.ndarray]]] = {}
        self._cols: dict[int, tuple[int, int, EventColumns]] = {}

    def time_span(self, run: Any) -> tuple[int, int] | None:
        if run.pk not in self._spans:
            self._spans[run.pk] = blocks.time_span(run)
        return self._spans[run.pk]

    def own_fields(self, run: Any, lo: int, hi: int) -> dict[str, np.ndarray]:
        """``OWN_FIELDS`` of the events that may overlap [lo, hi] (and maybe more around it)."""
        return _covering(self._own, run, lo, hi, lambda a, b: blocks.fields_near(run, a, b, OWN_FIELDS))

    def columns(self, run: Any, lo: int, hi: int) -> EventColumns:
        """Every column (per-peer counts too) of the events that may overlap [lo, hi]."""
        return _covering(self._cols, run, lo, hi, lambda a, b: blocks.columns_near(run, a, b))


def _covering(
    kept: dict[int, tuple[int, int, _T]], run: Any, lo: int, hi: int, read: Callable[[int, int], _T]
) -> _T:
    """What ``kept`` holds for ``run`` when its range covers [lo, hi]; else ``read`` over the union
    of both ranges, kept in its place."""
    got = kept.get(run.pk)
    if got is None or not got[0] <= lo <= hi <= got[1]:
        lo, hi = (min(lo, got[0]), max(hi, got[1])) if got else (lo, hi)
        got = kept[run.pk] = (lo, hi, read(lo, hi))
    return got[2]


def _reported_window(
    run: Any, t1_ns: int, t2_ns: int, lookback_ns: int | None, cache: EventCache
) -> tuple[int, int] | None:
    """The part of [t1, t2] the run has reported events for so far, at most its last ``lookback_ns``:
    a job posts late, so the newest seconds of a firing alert have no events yet while its earlier
    ones do. None when the run's events do not reach the window yet."""
    if lookback_ns is None:
        return t1_ns, t2_ns
    span = cache.time_span(run)
    if span is None or span[1] < t1_ns - blocks.MAX_PHASE_NS:
        return None
    hi = min(t2_ns, span[1] + 1_000_000_000)  # the newest event's start, and its phase after it
    return max(t1_ns, hi - lookback_ns), hi


OWN_FIELDS = ("start_ns", "end_ns", "rank", "layer", "phase", "bytes_recv")
# Peers' sends stand in only where a rank reported no receive totals; their per-peer columns are
# 2 x world size numbers per event (a 256-GPU job: gigabytes for a minute of events), so that
# fallback reads at most the newest few seconds of the window.
PEER_FALLBACK_NS = 5_000_000_000


def own_received_by_layer_phase(
    fields: dict[str, np.ndarray], rank: int, t1_ns: int, t2_ns: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What ``rank`` says it received per (layer, phase code) in events overlapping [t1, t2], from
    the integer columns only (``jobs.blocks.fields_near``); bytes descending."""
    sel = ((fields["rank"] == rank) & (fields["start_ns"] <= t2_ns) & (fields["end_ns"] >= t1_ns)
           & (fields["bytes_recv"] > 0))
    if not sel.any():
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    key = fields["layer"][sel] * (len(PHASES) + 1) + fields["phase"][sel]
    keys, inv = np.unique(key, return_inverse=True)
    total = np.bincount(inv, weights=fields["bytes_recv"][sel], minlength=len(keys)).astype(np.int64)
    order = np.argsort(-total, kind="stable")
    keys, total = keys[order], total[order]
    return keys // (len(PHASES) + 1), keys % (len(PHASES) + 1), total


def _received(
    run: Any, rank: int, lo: int, hi: int, *, fields: dict[str, np.ndarray], any_then: bool, cache: EventCache
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    got = own_received_by_layer_phase(fields, rank, lo, hi)
    if len(got[2]) or not any_then:  # named by its own totals, or nothing reported here
        return got
    lo = max(lo, hi - PEER_FALLBACK_NS)
    return received_by_layer_phase(cache.columns(run, lo, hi), rank, lo, hi)


def culprit_of_port(
    fabric: str, switch: str, port: str, t1: datetime, t2: datetime, *,
    cache: EventCache | None = None, lookback_ns: int | None = None,
) -> Culprit:
    """The run/rank on ``switch:port`` during [t1, t2] and the (layer, phase) it received most in.

    Unknown (``Culprit()``) when no active run of the fabric maps a rank to that port. With
    ``lookback_ns``, only the newest ``lookback_ns`` of the window that each run has reported events
    for is read (bounded work for a long alert whose job posts late). ``cache`` keeps each run's
    decoded events across calls (a moving incast's hot set, every alert of one evaluation)."""
    entries = (
        RankMapEntry.objects.select_related("run")
        .filter(run__fabric=fabric, switch=switch, switch_port=port, run__started_at__lte=t2)
        .filter(Q(run__ended_at=None) | Q(run__ended_at__gte=t1))
        .order_by("-run__started_at")
    )
    t1_ns, t2_ns = _ns(t1), _ns(t2)
    cache = cache or EventCache()
    first: Culprit | None = None
    for entry in entries[:4]:  # a port is one NIC: several runs only when one replaced another
        run = entry.run
        base: dict[str, Any] = {
            "run_name": run.name,
            "run_id": run.pk,
            "rank": entry.rank,
            "host": entry.host,
            "gpu": entry.gpu,
        }
        window = _reported_window(run, t1_ns, t2_ns, lookback_ns, cache)
        if window is None:
            first = first or Culprit(**base, unnamed=NO_EVENTS)
            continue
        lo, hi = window
        fields = cache.own_fields(run, lo, hi)
        any_then = bool(((fields["start_ns"] <= hi) & (fields["end_ns"] >= lo)).any())
        layers, phases, nbytes = _received(run, entry.rank, lo, hi, fields=fields, any_then=any_then,
                                           cache=cache)
        if not len(nbytes):
            first = first or Culprit(**base, unnamed=RANK_SILENT if any_then else NO_EVENTS)
            continue
        names = tuple(
            f"layer {la} {PHASES[p]}" if la >= 0 else PHASES[p]
            for la, p in zip(layers.tolist(), phases.tolist(), strict=True)
        )
        return Culprit(
            **base,
            layer=int(layers[0]) if layers[0] >= 0 else None,
            phase=PHASES[int(phases[0])],
            recv_bytes=int(nbytes[0]),
            phases=names[:8],
        )
    return first or Culprit()


def culprit_of_ports(
    fabric: str, ports: list[str], t1: datetime, t2: datetime, *, lookback_ns: int | None = None,
    cache: EventCache | None = None,
) -> Culprit:
    """The first ``culprit_of_port`` among ``switch:port`` names (a moving incast's hot set) that
    names its phase, else the first that names a run, else unknown."""
    cache = cache or EventCache()
    known = Culprit()
    for name in ports[:4]:
        switch, sep, port = name.partition(":")
        if sep:
            found = culprit_of_port(fabric, switch, port, t1, t2, cache=cache, lookback_ns=lookback_ns)
            if found.phase:
                return found
            known = known if known.known else found
    return known
