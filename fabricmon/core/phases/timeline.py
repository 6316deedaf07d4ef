"""A run's phase instances on the server's clock: which (layer, phase) key each is and its window,
and how many of each fall into each poll interval (the attribution's design matrix).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]



@dataclass(frozen=True)
class PhaseTimeline:
    """Phase instances of a run: which (layer, phase) key each is, and its window in server ns."""

    key: IntArray  # (N,) index into ``keys``
    start_ns: IntArray
    end_ns: IntArray
    keys: tuple[tuple[int, str], ...]  # (layer, phase) per key
    step: IntArray | None = None

    @classmethod
    def from_events(cls, events: Sequence[tuple[int, int, str, int, int]]) -> PhaseTimeline:
        """From (step, layer, phase, start_ns, end_ns) rows; keys sorted by (layer, phase order)."""
        order = {"dispatch": 0, "combine": 1}
        seen = {(int(e[1]), str(e[2])) for e in events}
        keys = sorted(seen, key=lambda k: (k[0], order.get(k[1], 9), k[1]))
        kid = {k: i for i, k in enumerate(keys)}
        return cls(
            key=np.asarray([kid[(int(e[1]), str(e[2]))] for e in events], dtype=np.int64),
            start_ns=np.asarray([e[3] for e in events], dtype=np.int64),
            end_ns=np.asarray([e[4] for e in events], dtype=np.int64),
            keys=tuple(keys),
            step=np.asarray([e[0] for e in events], dtype=np.int64),
        )


def occupancy(timeline: PhaseTimeline, edges_ns: IntArray) -> FloatArray:
    """(intervals, keys): instances of each key inside each interval, split pro rata at edges.

    Vectorized over instances; a phase longer than a poll interval is split over every interval it
    touches (expanded with ``np.repeat``), so 1 h of 1 s polls × 100 k phases stays O(N).
    """
    edges = np.asarray(edges_ns, dtype=np.int64)
    n_int, n_key = len(edges) - 1, len(timeline.keys)
    out = np.zeros((max(n_int, 0), n_key))
    if n_int <= 0 or not len(timeline.key):
        return out
    s, e = timeline.start_ns, np.maximum(timeline.end_ns, timeline.start_ns + 1)
    i0 = np.clip(np.searchsorted(edges, s, side="right") - 1, 0, n_int - 1)
    i1 = np.clip(np.searchsorted(edges, e, side="left") - 1, 0, n_int - 1)
    inside = (e > edges[0]) & (s < edges[-1])
    span = np.where(inside, i1 - i0 + 1, 0)
    inst = np.repeat(np.arange(len(s)), span)
    first = np.repeat(np.cumsum(span) - span, span)
    i = i0[inst] + (np.arange(len(inst)) - first)
    frac = (np.minimum(edges[i + 1], e[inst]) - np.maximum(edges[i], s[inst])) / (e[inst] - s[inst])
    np.add.at(out, (i, timeline.key[inst]), np.clip(frac, 0.0, None))
    return out


def design_rows(timeline: PhaseTimeline, edges_ns: IntArray) -> tuple[FloatArray, FloatArray]:
    """(occupancy (I, K), interval lengths in s (I,)) of the intervals between ``edges_ns``."""
    edges = np.asarray(edges_ns, dtype=np.int64)
    return occupancy(timeline, edges), np.diff(edges).astype(np.float64) / 1e9


def grouped_median(group: IntArray, values: IntArray, n_groups: int) -> IntArray:
    """np.median of ``values`` per group id 0..n_groups-1 (every group non-empty), vectorized:
    sort by (group, value) and average the middle one or two of each group."""
    order = np.lexsort((values, group))
    v = values[order].astype(np.float64)
    counts = np.bincount(group, minlength=n_groups)
    first = np.cumsum(counts) - counts
    lo, hi = first + (counts - 1) // 2, first + counts // 2
    out: IntArray = ((v[lo] + v[hi]) / 2).astype(np.int64)
    return out


def instances(step: IntArray, layer: IntArray, phase: IntArray) -> tuple[IntArray, IntArray]:
    """(unique (step, layer, phase) rows in sorted order, each event's row index), vectorised.

    The three columns are packed into one int64 (step · 2^24 + layer · 2^8 + phase), so the
    unique is a 1-D sort, several times faster than ``np.unique(axis=0)`` on the stacked columns."""
    step, layer, phase = (np.asarray(a, dtype=np.int64) for a in (step, layer, phase))
    small = not len(step) or (
        min(step.min(), layer.min(), phase.min()) >= 0
        and layer.max() < 1 << 16 and phase.max() < 1 << 8 and step.max() < 1 << 38
    )
    if not small:
        triples, inst = np.unique(np.stack([step, layer, phase], axis=1), axis=0, return_inverse=True)
        return triples, inst.reshape(-1)
    keys, inst = np.unique((step << 24) | (layer << 8) | phase, return_inverse=True)
    triples = np.stack([keys >> 24, (keys >> 8) & 0xFFFF, keys & 0xFF], axis=1)
    return triples, inst.reshape(-1)
