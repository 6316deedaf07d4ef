"""A run's phase views, kept up to date incrementally for the JSON API and the run's WebSocket.

The views cover a window of steps (``StepWindow``): the run's newest reported steps while it
runs, or a fixed page of history — never the whole run, so memory, the work of an update and the
bytes on the socket are bounded by the window, not by how long the job has trained. Events and
projected columns that slide out of the window are let go.

Recomputing the window from scratch reads its traffic matrices, decodes its event blocks and the
live window, and projects every (step, layer, phase) again. Here each of those is read once and
remembered; an update reads only what arrived since::

    event blocks      ids not folded in yet              → decoded, appended to the columns
    traffic matrices  (id, calls, n_ranks) changed / new → only those blobs read and projected
    live window       stream ids after the newest seen   → decoded, appended (trimmed to XLEN)
    projected rows    kept per (port-index version, rank-map key, routing, world size)

A cheap fingerprint (newest block id, rank-map hash, run state, topology version, newest frame
id) says whether anything changed at all; an unchanged run answers from the last result. The
gates are re-run on every change (they judge the run as a whole: medians, skew), vectorized over
the cached arrays. The attribution is not refitted: its normal-equation sums over the closed poll
intervals are kept (``core.phases.live_attribution.LiveAttribution``), an update adds the new intervals and
recomputes only the open tail, then solves the K×K system (docs/phases-live.md).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from django.conf import settings
from django.db.models import Count, Max

from collectors.traces.schema import PHASES, SOURCES
from fabricmon.core.phases.assess import SourceView, assess, attribution_input
from fabricmon.core.phases.clocks import estimate_skew
from fabricmon.core.phases.layout import FabricLayout, place_ranks
from fabricmon.core.phases.live_attribution import LiveAttribution
from fabricmon.core.phases.projector import ProjectorCache
from fabricmon.core.phases.routing import Routing
from fabricmon.core.phases.rows import shown_ports
from fabricmon.core.phases.timeline import grouped_median, instances
from fabricmon.jobs import blocks, matrix_blobs, matrix_read
from fabricmon.jobs.matrices import PAIRS_FROM_CELLS
from fabricmon.jobs.matrix_read import KeyPieces
from fabricmon.jobs.models import RankMapEntry, Run, TrafficMatrix
from fabricmon.phases import counters
from fabricmon.topology.fabric_view import fabric_view
from fabricmon.topology.models import Fabric

Key = tuple[int, int, str]  # (step, layer, phase)
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

PXN = Routing("pxn")  # what rail-optimized fabrics run; the API and the socket may ask for another
_PROJECTORS = ProjectorCache()
_EVENT_FIELDS = ("step", "layer", "phase", "rank", "start_ns", "end_ns", "clock_offset_ns")
MEASURED_MARGIN_NS = 60_000_000_000  # counters read this long after the last phase (as before)
FOLD_MARGIN_NS = 10_000_000_000  # poll intervals ending this long before the newest phase end are kept summed
MAX_WINDOW_STEPS = 64  # a page of history holds at most this many reported steps
# One computation of phase views at a time per process: the states and each fabric's decoded frames
# (``counters``) are shared by the request thread, the sockets' and the refresher's
# (``refresher.py``). A request that may take a recent answer never waits on it.
COMPUTE_LOCK = threading.RLock()


def default_window_steps() -> int:
    """How many of the run's newest reported steps the live views cover (settings)."""
    return max(1, min(MAX_WINDOW_STEPS, int(settings.FABRICMON_PHASE_WINDOW_STEPS)))


MAX_ROWS_LIMIT = 4096  # rows a views.json answer may ask for (``max_ports``)


def default_max_rows() -> int:
    """How many ports the views send as rows at most (settings; core.phases.rows says which)."""
    return max(1, min(MAX_ROWS_LIMIT, int(settings.FABRICMON_PHASE_MAX_PORTS)))


def unknown_fabric(name: str) -> str:
    return (f"the run's fabric {name!r} is not in the topology: load it (manage.py load_topology) "
            "or correct the run's fabric")


class NoViewError(Exception):
    """The run has nothing to show yet (or names no fabric); ``str()`` says why."""


@dataclass
class _Projected:
    """Projected per-port bytes of the columns already routed, for one routing context."""

    calls: dict[Key, KeyPieces] = field(default_factory=dict)  # key → the row and parts summed
    rows_in: dict[Key, FloatArray] = field(default_factory=dict)  # key → row + parts, projected
    rows_out: dict[Key, FloatArray] = field(default_factory=dict)
    # key → its row's (id, calls, n_ranks) and projection; key → the ids of the parts summed so
    # far and their summed projection (parts are only added until a fold takes them all)
    base: dict[Key, tuple[tuple[int, int, int], FloatArray, FloatArray]] = field(default_factory=dict)
    staged: dict[Key, tuple[tuple[int, ...], FloatArray, FloatArray]] = field(default_factory=dict)

    def forget_row(self, key: Key) -> None:
        """Its row and parts are read again next time (folded, deleted or slid out since)."""
        self.base.pop(key, None)
        self.staged.pop(key, None)


@dataclass(frozen=True)
class PhaseSnapshot:
    """One computed state of a run's views: ``meta`` (run, fabric, routing, rank map, clock, ports)
    and one :class:`SourceView` per source, numpy arrays inside (the socket diffs these)."""

    version: int
    state: str
    meta: dict[str, Any]
    views: dict[str, SourceView]
    error: str | None = None

    def rows(self, max_rows: int | None = None) -> list[int] | None:
        """The port positions sent as rows (``core.phases.rows``): those chosen when the views were
        computed, or chosen again for another ``max_rows``; None when there are no views."""
        if "ports" not in self.meta:
            return None
        if max_rows is None:
            return self.meta.get("shown_ports")
        return shown_ports(self.views.values(), len(self.meta["ports"]), max_rows).tolist()

    def wire_meta(self, rows: list[int] | None) -> dict[str, Any]:
        """``meta`` as sent: the row labels (``ports``) of the ``rows`` only, which ``shown_ports``
        names; ``ports_total`` is the fabric's port count. The full labels stay in the snapshot
        for the run's report and exports."""
        if rows is None:
            return dict(self.meta)
        labels = self.meta["ports"]
        return {**self.meta, "ports": [labels[p] for p in rows], "shown_ports": rows,
                "ports_total": len(labels)}

    def as_dict(self, max_rows: int | None = None) -> dict[str, Any]:
        if self.error is not None:
            return {"error": self.error, "views": {}}
        rows = self.rows(max_rows)
        views = {name: v.as_dict(rows=rows) for name, v in self.views.items()}
        return {**self.wire_meta(rows), "views": views}


@dataclass(frozen=True)
class _Result:
    """A computed snapshot, the fingerprint it was computed at, and when it was last known current
    (monotonic seconds)."""

    fingerprint: tuple[Any, ...]
    snap: PhaseSnapshot
    at: float
    at_ns: int  # the same instant, wall clock (what an answer says)

    def settled(self) -> tuple[Any, ...]:
        return self.fingerprint[2:-1]  # (blocks, newest block, *settled, frames): see fingerprint


@dataclass(frozen=True)
class StepWindow:
    """Which steps the views cover: the newest ``count`` reported steps (live), or the fixed
    reported steps in [lo, hi] (a page of history). Never the whole run: what a view holds, and
    what its socket sends, is bounded by the window, not by the run's length."""

    count: int = field(default_factory=default_window_steps)
    lo: int | None = None  # fixed: both set
    hi: int | None = None

    @property
    def live(self) -> bool:
        return self.lo is None

    def steps(self, run: Run, source: str | None) -> list[int]:
        """The window's reported steps now, oldest first."""
        if self.lo is None or self.hi is None:
            return sorted(blocks.newest_steps(run, self.count, source=source))
        # a page: the newest ``count`` reported steps of [lo, hi] (paging back lands next to hi)
        newest = blocks.newest_steps(run, self.count, source=source, before=self.hi + 1)
        return sorted(s for s in newest if s >= self.lo)

    @classmethod
    def page(cls, lo: int, hi: int) -> StepWindow:
        """The reported steps of [lo, hi], at most MAX_WINDOW_STEPS (a ``ValueError`` names a bad
        range)."""
        if lo < 0 or hi < lo:
            raise ValueError(f"need 0 ≤ steps_from ≤ steps_to (got {lo}, {hi})")
        return cls(count=MAX_WINDOW_STEPS, lo=lo, hi=hi)


# a dense (K, R, R) float32 stack is projected at most this many bytes at a time
_STACK_BYTES = 256 << 20


def _project_blobs(
    projector: Any, routing: Routing, world: int, blobs: Any
) -> dict[int, tuple[FloatArray, FloatArray]]:
    """id → (in, out) per-port bytes of each (id, n_ranks, sent) read, one at a time."""
    out: dict[int, tuple[FloatArray, FloatArray]] = {}
    if _by_cells(world, routing):
        for mid, n, sent in blobs:
            out[mid] = _project_sum(projector, routing, world, [(n, sent)])
        return out
    per = max(1, _STACK_BYTES // (4 * world * world))
    batch: list[tuple[int, np.ndarray]] = []

    def flush() -> None:
        # (float32: half the bytes; ~6e-8 relative)
        stack = np.zeros((len(batch), world, world), dtype=np.float32)
        for i, (_, a) in enumerate(batch):
            stack[i, : a.shape[0], : a.shape[1]] = a[:world, :world]
        pb = projector.project(stack)
        for i, (mid, _) in enumerate(batch):
            out[mid] = (pb.in_bytes[i], pb.out_bytes[i])
        batch.clear()

    for mid, n, sent in blobs:
        batch.append((mid, matrix_blobs.decode(sent, n)))
        if len(batch) >= per:
            flush()
    if batch:
        flush()
    return out


def _by_cells(world: int, routing: Routing) -> bool:
    # many ranks: each matrix folded from its nonzero cells — a (K, R, R) stack was 127 MB a key
    # at 5,632 ranks, and the scale bench's views.json took 2.9 s
    return world * world > PAIRS_FROM_CELLS and routing.mode == "pxn"


def _project_sum(projector: Any, routing: Routing, world: int, blobs: list[tuple[int, Any]]) -> tuple[
    FloatArray, FloatArray
]:
    """(in, out) per-port bytes of the sum of ``blobs`` ((n_ranks, sent) each): one projection
    however many parts a key has gathered (a job whose ranks post alone appends thousands)."""
    if _by_cells(world, routing):
        src_l, dst_l, val_l = [], [], []
        for n, sent in blobs:
            cells, vals = matrix_blobs.decode_pairs(sent, n)
            src, dst = np.divmod(cells, n)
            keep = (src < world) & (dst < world)
            src_l.append(src[keep])
            dst_l.append(dst[keep])
            val_l.append(vals[keep].astype(np.float64))
        folded = projector.fold_cells(np.concatenate(src_l), np.concatenate(dst_l), np.concatenate(val_l))
        pb = projector.project_folded(folded[None, :])
        return pb.in_bytes[0], pb.out_bytes[0]
    total = np.zeros((world, world), dtype=np.float32)
    for n, sent in blobs:
        a = matrix_blobs.decode(sent, n)
        total[: a.shape[0], : a.shape[1]] += a[:world, :world]
    pb = projector.project(total[None])
    return pb.in_bytes[0], pb.out_bytes[0]


class RunPhaseState:
    """Everything already read and projected for one run, one event source (None = all) and one
    step window (the newest steps by default)."""

    def __init__(self, run_id: int, source: str | None, window: StepWindow | None = None) -> None:
        self.run_id, self.source = run_id, source
        self.window = window or StepWindow()
        self.lock = threading.Lock()
        self.folded: dict[int, tuple[int, int]] = {}  # block id → (newest step, newest end) it held
        self.events: dict[str, IntArray] = {f: np.zeros(0, dtype=np.int64) for f in _EVENT_FIELDS}
        self.projected: OrderedDict[tuple[Any, ...], _Projected] = OrderedDict()
        self.placement: Any = None
        self.rank_hash = ""
        self.results: dict[Routing, _Result] = {}
        self.version = 0
        self.compute_s = 0.0  # how long the last recompute took (wall s)
        self.attribution: OrderedDict[Routing, LiveAttribution] = OrderedDict()
        self.stats = {"blocks_read": 0, "matrices_read": 0, "columns_projected": 0, "recomputes": 0,
                      "attribution_rebuilds": 0, "intervals_folded": 0, "intervals_provisional": 0}

    # -- reading what is new --------------------------------------------------------------------
    def _wanted(self, step: IntArray, end_ns: IntArray, lo: int, hi: int, fit_lo: int | None) -> Any:
        """Events the views need: the window's steps, and (live) those the counters still hold."""
        ok = (step >= lo) & (step <= hi)
        return ok | (end_ns >= fit_lo) if fit_lo is not None else ok

    def _fold_in_blocks(self, run: Run, lo: int, hi: int, fit_lo: int | None) -> None:
        """Read the blocks holding the window's steps (or, live, events the counters still hold)
        not read yet; let go of events that left both."""
        keep = self._wanted(self.events["step"], self.events["end_ns"], lo, hi, fit_lo)
        if not keep.all():
            self.events = {f: a[keep] for f, a in self.events.items()}
            self.folded = {b: top for b, top in self.folded.items() if top[0] >= lo
                           or (fit_lo is not None and top[1] >= fit_lo)}
        ids = blocks.block_ids(run, min_step=lo, max_step=hi)
        if fit_lo is not None:
            ids |= blocks.block_ids(run, ending_after=fit_lo)
        todo = sorted(ids - self.folded.keys())
        if not todo:
            return
        parts: dict[str, list[IntArray]] = {f: [self.events[f]] for f in _EVENT_FIELDS}
        src = SOURCES.index(self.source) if self.source in SOURCES else None
        # only the per-event columns: the per-peer blobs (most of a block's bytes) are not read
        for block_id, cols in blocks.read_block_fields(todo, (*_EVENT_FIELDS, "source")):
            ok = self._wanted(cols["step"], cols["end_ns"], lo, hi, fit_lo)
            ok &= (cols["step"] >= 0) & (cols["layer"] >= 0)
            if self.source is not None:
                ok &= cols["source"] == (src if src is not None else -99)
            for f in _EVENT_FIELDS:
                parts[f].append(cols[f][ok])
            newest = (int(cols["step"].max()), int(cols["end_ns"].max())) if len(cols["step"]) else (-1, -1)
            self.folded[int(block_id)] = newest
            self.stats["blocks_read"] += 1
        self.events = {f: np.concatenate(p) for f, p in parts.items()}

    def _rank_map(self, run: Run, layout: FabricLayout, world: int) -> Any:
        entries = _rank_map_entries(run)
        digest = hashlib.sha1(repr((layout.index.version, world, entries)).encode()).hexdigest()
        if digest != self.rank_hash or self.placement is None:
            self.placement, self.rank_hash = place_ranks(layout, entries, world), digest
        return self.placement

    def _project_new(
        self, run: Run, layout: FabricLayout, placement: Any, routing: Routing, *, world: int, keys: list[Key]
    ) -> tuple[FloatArray, FloatArray]:
        """Per-port bytes of ``keys``; only rows and parts new since the last call are read. A key
        is its row's projection plus its unfolded parts' (projection is linear in the bytes), so
        the view never folds parts into rows — reading writes nothing — and a part is projected
        once, a row again only when ingest has folded parts into it."""
        ctx = (layout.index.version, placement.key, routing, world)
        cache = self.projected.get(ctx)
        if cache is None:
            cache = self.projected[ctx] = _Projected()
            while len(self.projected) > 4:
                self.projected.popitem(last=False)
        self.projected.move_to_end(ctx)
        lo, hi = min(k[0] for k in keys), max(k[0] for k in keys)
        for old_key in [k for k in cache.calls if k[0] < lo]:  # slid out of the window
            del cache.calls[old_key], cache.rows_in[old_key], cache.rows_out[old_key]
            cache.forget_row(old_key)
        pieces = matrix_read.window(run, lo, hi, self.source)
        wanted = set(keys)
        todo = [k for k, p in pieces.items() if k in wanted and cache.calls.get(k) != p]
        if todo:
            projector = _PROJECTORS.get(layout, placement, routing)
            rows = {pieces[k].row[0]: k for k in todo
                    if (b := cache.base.get(k)) is None or b[0] != pieces[k].row}
            got = _project_blobs(projector, routing, world, matrix_read.sent_blobs(rows, ()))
            for mid, k in rows.items():
                if mid in got:
                    cache.base[k] = (pieces[k].row, *got[mid])
                    cache.staged.pop(k, None)  # (a row read anew: its parts are summed anew)
                else:
                    cache.forget_row(k)  # (deleted since the window was read)
            read = len(got)
            for k in todo:
                if k not in cache.base:
                    continue
                ids, s_in, s_out = cache.staged.get(k, ((), None, None))
                summed = set(ids)
                if not summed <= set(pieces[k].parts):  # folded since: the row is read again
                    cache.forget_row(k)
                    continue
                new = [pid for pid in pieces[k].parts if pid not in summed]
                if new:
                    blobs = [(n, sent) for _, n, sent in matrix_read.sent_blobs((), new)]
                    read += len(blobs)
                    if len(blobs) < len(new):  # folded into the row since the window was read
                        cache.forget_row(k)
                        continue
                    n_in, n_out = _project_sum(projector, routing, world, blobs)
                    s_in = n_in if s_in is None else s_in + n_in
                    s_out = n_out if s_out is None else s_out + n_out
                    cache.staged[k] = (pieces[k].parts, s_in, s_out)
                _, b_in, b_out = cache.base[k]
                cache.rows_in[k] = b_in if s_in is None else b_in + s_in
                cache.rows_out[k] = b_out if s_out is None else b_out + s_out
                cache.calls[k] = pieces[k]
            self.stats["matrices_read"] += read
            self.stats["columns_projected"] += len(todo)
        have = [k for k in keys if k in cache.rows_in]
        if not have:
            n = len(layout.index)
            return np.zeros((0, n)), np.zeros((0, n))
        return np.stack([cache.rows_in[k] for k in have]), np.stack([cache.rows_out[k] for k in have])

    # -- the views ------------------------------------------------------------------------------
    def settled_fingerprint(self, run: Run, routing: Routing) -> tuple[Any, ...]:
        """What a job owner or admin changes by hand — the rank map's content (an upsert keeps the
        rows' ids), state, world size, topology version — and the routing asked for (one query of
        the run's rank map; no Redis)."""
        version = fabric_view(run.fabric).index.version if run.fabric else ""
        return (_rank_map_digest(run), run.state, run.world_size, version, routing)

    def fingerprint(self, run: Run, routing: Routing) -> tuple[Any, ...]:
        """Changes whenever anything the views depend on changes: the event blocks (one query),
        the settled part and the newest counter frame's id (one Redis XREVRANGE of one entry; reads
        the new frames)."""
        frames = counters.frames_of(run.fabric).update(run.fabric) if run.fabric else b""
        return (*blocks.fingerprint(run.pk), *self.settled_fingerprint(run, routing), frames)

    def current_at_ns(self, routing: Routing) -> int | None:
        """When the last result for ``routing`` was last known current (wall clock ns)."""
        hit = self.results.get(routing)
        return hit.at_ns if hit is not None else None

    def recent(self, run: Run, routing: Routing, max_stale_s: float) -> PhaseSnapshot | None:
        """The last snapshot if it was current at most ``max_stale_s`` ago and nothing settled has
        changed since (rank map, state, world size, topology, routing) — only events and counter
        frames that streamed in meanwhile may be missing from it — else None. Lock-free: a request
        served this way never waits behind a computation."""
        hit = self.results.get(routing)
        # a run whose views take longer to compute than the bound (thousands of ranks on a busy
        # box) is answered from its newest result up to two computations old: waiting for one in
        # the request would give nothing fresher by the time it answers
        if hit is None or time.monotonic() - hit.at > max(max_stale_s, 2 * self.compute_s):
            return None
        try:
            return hit.snap if hit.settled() == self.settled_fingerprint(run, routing) else None
        except Fabric.DoesNotExist:
            return None

    def snapshot(self, run: Run, routing: Routing = PXN, max_stale_s: float = 0.0) -> PhaseSnapshot:
        """The run's views now: from the last result when nothing changed, else recomputed over the
        cached arrays with only the new data read. ``max_stale_s`` > 0: a result at most that old
        whose settled data is unchanged is answered as it is (``recent``; ``refresher.py`` keeps
        the watched runs' results that fresh)."""
        if max_stale_s > 0 and run.fabric and (snap := self.recent(run, routing, max_stale_s)) is not None:
            return snap
        with COMPUTE_LOCK, self.lock:
            if not run.fabric:
                return PhaseSnapshot(
                    self.version, run.state, {}, {}, "the run names no fabric: set it when creating the run"
                )
            try:
                fp = self.fingerprint(run, routing)
            except Fabric.DoesNotExist:  # a name typed at creation, or a fabric deleted since
                return PhaseSnapshot(self.version, run.state, {}, {}, unknown_fabric(run.fabric))
            hit = self.results.get(routing)
            if hit is not None and hit.fingerprint == fp:
                self.results[routing] = _Result(fp, hit.snap, time.monotonic(), time.time_ns())
                return hit.snap
            self.version += 1
            self.stats["recomputes"] += 1
            started = time.monotonic()
            try:
                snap = self._compute(run, routing)
            except NoViewError as why:
                snap = PhaseSnapshot(self.version, run.state, {}, {}, str(why))
            except Fabric.DoesNotExist:  # deleted between the fingerprint and the views
                snap = PhaseSnapshot(self.version, run.state, {}, {}, unknown_fabric(run.fabric))
            self.compute_s = time.monotonic() - started
            self.results[routing] = _Result(fp, snap, time.monotonic(), time.time_ns())
            while len(self.results) > 4:  # routings asked for recently (a seed per client at most)
                del self.results[next(iter(self.results))]
            return snap

    def _live_attribution(self, routing: Routing) -> LiveAttribution:
        """The kept attribution sums for ``routing``'s columns (4 routings at most)."""
        live = self.attribution.get(routing)
        if live is None:
            live = self.attribution[routing] = LiveAttribution(FOLD_MARGIN_NS)
            while len(self.attribution) > 4:
                self.attribution.popitem(last=False)
        self.attribution.move_to_end(routing)
        return live

    def _compute(self, run: Run, routing: Routing) -> PhaseSnapshot:
        view = fabric_view(run.fabric)
        layout = view.layout
        steps = self.window.steps(run, self.source)
        if not steps:
            raise NoViewError("no phase events with step and layer for this run yet"
                              if self.window.live else "the run reported no steps in this range")
        lo, hi = steps[0], steps[-1]
        # the attribution is fitted over every poll interval the counters still hold, so a live
        # window also keeps the events overlapping them (bounded by the live window's length)
        fit_lo = counters.first_edge(run.fabric) if self.window.live else None
        self._fold_in_blocks(run, lo, hi, fit_lo)
        ev = self.events
        n_matrices = TrafficMatrix.objects.filter(run=run, step__gte=lo, step__lte=hi, layer__gte=0)
        if self.source:
            n_matrices = n_matrices.filter(source=self.source)
        top = n_matrices.aggregate(n=Count("id"), ranks=Max("n_ranks"))
        if not top["n"]:
            raise NoViewError("no per-(step, layer, phase) traffic matrices for this run yet")
        if not len(ev["step"]):
            raise NoViewError("no phase events with step and layer for this run yet")
        world = run.world_size or int(top["ranks"])
        placement = self._rank_map(run, layout, world)
        triples, inst = instances(ev["step"], ev["layer"], ev["phase"])
        clock = estimate_skew(
            inst, ev["rank"], ev["end_ns"], world, offset_known=bool((ev["clock_offset_ns"] != 0).all())
        )
        s_med = grouped_median(inst, ev["start_ns"], len(triples))
        e_med = grouped_median(inst, ev["end_ns"], len(triples))
        all_keys = [(int(s), int(lay), PHASES[int(c)]) for s, lay, c in triples]
        in_window = [i for i, k in enumerate(all_keys) if lo <= k[0] <= hi]
        p_in, p_out = self._project_new(run, layout, placement, routing, world=world,
                                        keys=[all_keys[i] for i in in_window])
        cache = self.projected[(layout.index.version, placement.key, routing, world)]
        pick = np.array([i for i in in_window if all_keys[i] in cache.rows_in], dtype=np.int64)
        keys = [all_keys[i] for i in pick]
        if not keys:
            raise NoViewError("no phase events match the run's traffic matrices yet")
        meas = counters.measured_bytes(run.fabric, int(s_med.min()), int(e_med.max()) + MEASURED_MARGIN_NS)
        sums = prepared = None
        if meas is not None:
            # what gates.assess fits the attribution on — every phase instance the counters hold,
            # not only the window's columns — built once; its sums kept across updates
            prepared = attribution_input(
                all_keys, s_med, e_med, edges_ns=meas[0], measured_in=meas[1], measured_out=meas[2]
            )
            live = self._live_attribution(routing)
            frames = counters.kept(run.fabric)
            sums = live.sums(prepared.timeline, meas[0], prepared.measured,
                             generation=(run.fabric, id(frames), frames.generation if frames else -1))
            for k in ("rebuilds", "intervals_folded", "intervals_provisional"):
                self.stats[k if k != "rebuilds" else "attribution_rebuilds"] = live.stats[k]
        nics = _nic_ports(layout, placement, p_in, p_out)
        views = assess(
            phase_keys=keys,
            start_ns=s_med[pick],
            end_ns=e_med[pick],
            projected_in=p_in,
            projected_out=p_out,
            coverage=placement.coverage,
            missing_ranks=np.flatnonzero(placement.gpu_of_rank < 0),
            placement_problems=placement.problems,
            clock_error_s=clock.error_bound_ns / 1e9,
            clock_noise_s=clock.noise_ns / 1e9,
            offset_known=clock.offset_known,
            nic_ports=nics,
            edges_ns=meas[0] if meas else None,
            measured_in=meas[1] if meas else None,
            measured_out=meas[2] if meas else None,
            attribution_sums=sums,
            prepared=prepared,
        )
        meta = {
            "run": run.pk,
            "fabric": run.fabric,
            "routing": routing.label(),
            "rank_map": {"coverage": placement.coverage, "problems": list(placement.problems[:20])},
            "clock": clock.as_dict(),
            "ports": view.port_rows,
            # the run's own ports: its NICs' leaf ports and every port its traffic uses (the page
            # shows these by default)
            "run_ports": _run_ports(nics, p_in, p_out),
            "window": self._window_meta(run, steps),
            # the rows sent (every port up to FABRICMON_PHASE_MAX_PORTS, else the hot and busiest)
            "shown_ports": shown_ports(views.values(), len(view.port_rows), default_max_rows()).tolist(),
        }
        return PhaseSnapshot(self.version, run.state, meta, views)

    def _window_meta(self, run: Run, steps: list[int]) -> dict[str, Any]:
        """Which steps the views cover, and where the rest of the run is (for paging)."""
        span = blocks.step_span(run, source=self.source)
        return {
            "live": self.window.live,
            "steps": [steps[0], steps[-1]],
            "reported_steps": len(steps),
            "window_steps": self.window.count,
            "run_steps": list(span) if span else None,
        }


def _rank_map_entries(run: Run) -> list[dict[str, Any]]:
    return list(RankMapEntry.objects.filter(run=run).order_by("rank")
                .values("rank", "host", "local_rank", "switch", "switch_port"))


def _rank_map_digest(run: Run) -> str:
    """The run's rank map as placed: changes with any entry's content, not only with new rows."""
    rows = RankMapEntry.objects.filter(run=run).order_by("rank").values_list(
        "rank", "host", "local_rank", "switch", "switch_port")
    return hashlib.sha1(repr(list(rows)).encode()).hexdigest()


def _nic_ports(layout: FabricLayout, placement: Any, p_in: FloatArray, p_out: FloatArray) -> IntArray:
    """The leaf ports of the run's NICs: the placed ranks' NIC ports, and every host-facing port
    the projection sends through (PXN may use a NIC of the host that no rank is placed on)."""
    gpus = placement.gpu_of_rank[placement.gpu_of_rank >= 0]
    n = len(layout.index)
    used = (p_in > 0).any(axis=0) | (p_out > 0).any(axis=0) if len(p_in) else np.zeros(n, bool)
    host = np.flatnonzero(used & layout.index.host_facing)
    return np.union1d(layout.nic_pos[gpus], host).astype(np.int64)


def _run_ports(nics: IntArray, p_in: FloatArray, p_out: FloatArray) -> list[int]:
    used = (p_in > 0).any(axis=0) | (p_out > 0).any(axis=0) if len(p_in) else np.zeros(0, bool)
    out: list[int] = np.union1d(nics, np.flatnonzero(used)).tolist()
    return out


_STATES: OrderedDict[tuple[int, str, str | None, StepWindow], RunPhaseState] = OrderedDict()
_STATES_LOCK = threading.Lock()
MAX_RUNS = 16  # runs whose arrays stay in memory (least recently asked for goes first)


def run_state(run: Run, source: str | None = None, window: StepWindow | None = None) -> RunPhaseState:
    """The run's state for a step window (default: the newest steps; created on first use). Keyed
    with the start time too, so a run id that a database reuses (tests flush between cases) never
    meets another run's arrays."""
    window = window or StepWindow()
    with _STATES_LOCK:
        key = (int(run.pk), run.started_at.isoformat(), source, window)
        st = _STATES.get(key)
        if st is None:
            st = _STATES[key] = RunPhaseState(int(run.pk), source, window)
            while len(_STATES) > MAX_RUNS:
                _STATES.popitem(last=False)
        _STATES.move_to_end(key)
        return st
