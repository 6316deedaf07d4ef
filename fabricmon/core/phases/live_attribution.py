"""Attribution sums of a run that is still growing: closed poll intervals summed once, the open
edge recomputed on every update (see :class:`LiveAttribution`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fabricmon.core.phases.attribution_fit import AttributionSums
from fabricmon.core.phases.timeline import PhaseTimeline, design_rows

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass
class _Chunk:
    edges: IntArray  # the chunk's poll edges (intervals + 1)
    sums: AttributionSums


class LiveAttribution:
    """Attribution sums of a run that is still growing: closed intervals summed once, the open
    edge recomputed on every update, so an update costs O(new intervals + K²·C), not a refit.

    ``sums(timeline, edges, measured)`` returns the :class:`AttributionSums` of exactly those
    intervals and phase windows — what a fresh pass would sum — and keeps (``folds``) every
    interval that ends more than ``margin_ns`` before the newest phase end::

        intervals  │ kept chunks (summed once)          │ provisional tail (< margin) │
                   │ 64 │ 64 │ … │ growing           │ recomputed each update       │
                                                        ▲ newest phase end − margin

    What is kept is checked, cheaply, on every call and given up where it no longer holds: the
    kept edges must still be the measured edges (a trimmed live window drops whole chunks from
    the front; the rows of a partly trimmed chunk are recomputed while they last; anything else
    — a recreated stream, ``generation`` changed — rebuilds), and the phase instances
    overlapping the kept intervals must be the same instances with the same windows (a late
    rank moving a median there, or a new (layer, phase) key in that time, rebuilds). New keys
    elsewhere just pad the sums.
    """

    CHUNK = 64

    def __init__(self, margin_ns: int = 10_000_000_000, *, background: bool = False) -> None:
        self.margin_ns = int(margin_ns)
        self.background = background
        self.chunks: list[_Chunk] = []
        self.total: AttributionSums | None = None
        self.generation: object = None
        self.columns = -1
        self._sig: tuple[IntArray, ...] = ()
        self.stats = {"rebuilds": 0, "intervals_folded": 0, "intervals_provisional": 0, "chunks_dropped": 0}

    def _reset(self) -> None:
        if self.chunks:
            self.stats["rebuilds"] += 1
        self.chunks, self.total, self._sig = [], None, ()

    @staticmethod
    def _signature(timeline: PhaseTimeline, lo: int, hi: int) -> tuple[IntArray, ...]:
        """The instances overlapping [lo, hi): their (layer, phase) key and window, in a fixed order."""
        s, e = timeline.start_ns, np.maximum(timeline.end_ns, timeline.start_ns + 1)
        sel = np.flatnonzero((e > lo) & (s < hi))
        keys = np.array([hash(k) for k in timeline.keys], dtype=np.int64)
        kk = keys[timeline.key[sel]] if len(keys) else np.zeros(0, dtype=np.int64)
        order = np.lexsort((kk, timeline.end_ns[sel], timeline.start_ns[sel]))
        return kk[order], timeline.start_ns[sel][order], timeline.end_ns[sel][order]

    def _still_valid(self, timeline: PhaseTimeline, edges: IntArray) -> bool:
        """Drop front chunks the window trimmed; False when what remains no longer holds."""
        while self.chunks and self.chunks[0].edges[0] < edges[0]:
            self.chunks.pop(0)
            self.stats["chunks_dropped"] += 1
            self.total = None
        if not self.chunks:
            return False
        lo, hi = int(self.chunks[0].edges[0]), int(self.chunks[-1].edges[-1])
        j0 = int(np.searchsorted(edges, lo))
        kept = np.concatenate([self.chunks[0].edges[:1], *[c.edges[1:] for c in self.chunks]])
        if j0 + len(kept) > len(edges) or not np.array_equal(edges[j0 : j0 + len(kept)], kept):
            return False
        if not self._sig:
            return False
        k_old, s_old, e_old = self._sig  # kept as of the last fold: narrowed to what is kept now
        keep = (np.maximum(e_old, s_old + 1) > lo) & (s_old < hi)
        old = (k_old[keep], s_old[keep], e_old[keep])
        now = self._signature(timeline, lo, hi)
        return len(now[0]) == len(old[0]) and all(np.array_equal(a, b) for a, b in zip(now, old, strict=True))

    def sums(
        self, timeline: PhaseTimeline, edges_ns: IntArray, measured_bytes: FloatArray, *,
        generation: object = None,
    ) -> AttributionSums:
        """The sums over ``edges_ns`` / ``measured_bytes`` (I, C) for ``timeline``'s phases, with the
        closed intervals kept; ``generation`` names the measurements' source (a change rebuilds)."""
        edges = np.asarray(edges_ns, dtype=np.int64)
        m = np.asarray(measured_bytes, dtype=np.float64)
        if m.ndim != 2 or m.shape[0] != len(edges) - 1:
            raise ValueError(f"measured bytes {m.shape} do not match {len(edges) - 1} intervals")
        stale = generation != self.generation or m.shape[1] != self.columns
        if stale or not self._still_valid(timeline, edges):
            self._reset()
        self.generation, self.columns = generation, m.shape[1]
        if self.chunks and self.total is None:  # chunks dropped: re-add the rest (K×C per chunk)
            self.total = AttributionSums(timeline.keys, self.columns, background=self.background)
            for c in self.chunks:
                self.total += c.sums
        n_int = len(edges) - 1
        if self.chunks:
            j0 = int(np.searchsorted(edges, self.chunks[0].edges[0]))
            j1 = int(np.searchsorted(edges, self.chunks[-1].edges[-1]))
        else:
            j0 = j1 = 0
        # fold the intervals that closed: ending at least margin before the newest phase end
        newest = int(timeline.end_ns.max()) if len(timeline.end_ns) else int(edges[0])
        j2 = max(j1, int(np.searchsorted(edges, newest - self.margin_ns, side="right")) - 1)
        j2 = min(j2, n_int)
        if j2 > j1:
            self._fold(timeline, edges, m, j1, j2)
            self._sig = self._signature(timeline, int(self.chunks[0].edges[0]), int(edges[j2]))
            if j0 == j1:  # first fold: the kept region starts here
                j0 = int(np.searchsorted(edges, self.chunks[0].edges[0]))
            j1 = j2
        out = self.total.copy() if self.total is not None else AttributionSums(
            timeline.keys, self.columns, background=self.background)
        # the provisional parts: before the kept chunks (a partly trimmed chunk) and the open tail
        prov = AttributionSums(timeline.keys, self.columns, background=self.background)
        for a, b in ((0, j0), (j1, n_int)):
            if b > a:
                occ, dt_s = design_rows(timeline, edges[a : b + 1])
                prov.add(occ, m[a:b], dt_s)
        self.stats["intervals_provisional"] = (j0 - 0) + (n_int - j1)
        out += prov
        return out

    def _fold(self, timeline: PhaseTimeline, edges: IntArray, m: FloatArray, j1: int, j2: int) -> None:
        """Sum intervals [j1, j2) once into the kept chunks (≤ CHUNK intervals each) and the total."""
        if self.total is None:
            self.total = AttributionSums(timeline.keys, self.columns, background=self.background)
        a = j1
        while a < j2:
            last = self.chunks[-1] if self.chunks else None
            room = self.CHUNK - (len(last.edges) - 1) if last is not None else 0
            if room <= 0:
                last = None
                room = self.CHUNK
            b = min(j2, a + room)
            occ, dt_s = design_rows(timeline, edges[a : b + 1])
            part = AttributionSums(timeline.keys, self.columns, background=self.background)
            part.add(occ, m[a:b], dt_s)
            if last is None:
                self.chunks.append(_Chunk(edges[a : b + 1].copy(), part))
            else:
                last.sums += part
                last.edges = np.concatenate([last.edges, edges[a + 1 : b + 1]])
            self.total += part
            self.stats["intervals_folded"] += b - a
            a = b
