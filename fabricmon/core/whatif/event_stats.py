"""What the What-if takes from a run's events, as array operations over the event columns:

    per (step, layer, phase)   median start and end (s), Σ bytes sent
    timed collectives          bytes/s of those whose process group sits in one host (fast) or
                               has one rank per host (slow): the measured fast/slow ratio
    sized collectives          median per-rank bytes of all-reduce / all-gather / reduce-scatter

Medians are numpy's (the mean of the two middle values, in float64, for an even count); byte sums
accumulate in event order. A process group's ranks arrive as a string per event ("0,4,8,12"); the
strings are factorised (a dict lookup an event) and each distinct group parsed and classified once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from fabricmon.core.whatif.terrace_run import measured_ratio

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Key = tuple[int, int, str]
SIZED = ("allreduce", "allgather", "reducescatter")
NONE, FAST, SLOW = 0, 1, 2


@dataclass(frozen=True)
class EventArrays:
    """A run's events as parallel int64 columns; ``group`` codes into ``groups`` (pg_ranks strings)."""

    step: IntArray
    layer: IntArray
    phase: IntArray  # codes into the schema's PHASES
    start_ns: IntArray
    end_ns: IntArray
    bytes_sent: IntArray
    group: IntArray
    groups: tuple[str, ...]


def factorise(strings: Sequence[str], index: dict[str, int]) -> IntArray:
    """Codes of ``strings`` in ``index`` (new strings are added to it, in order of appearance).
    The distinct strings are found by ``dict.fromkeys`` and the codes read by ``map`` — both loops
    in C, not a Python generator per event (819 k events at 4,096 ranks)."""
    for s in dict.fromkeys(strings):
        index.setdefault(s, len(index))
    return np.fromiter(map(index.__getitem__, strings), dtype=np.int64, count=len(strings))


def group_classes(groups: Sequence[str], host_of_rank: IntArray) -> IntArray:
    """Per distinct process group: FAST (≥ 2 ranks, all on one placed host), SLOW (≥ 2 ranks, one
    per host), else NONE. Ranks outside the world are ignored."""
    out = np.zeros(len(groups), dtype=np.int64)
    for i, g in enumerate(groups):
        ranks = [int(x) for x in g.split(",") if x.strip().isdigit()]
        ranks = [r for r in ranks if 0 <= r < len(host_of_rank)]
        if len(ranks) < 2:
            continue
        hosts = host_of_rank[ranks]
        if (hosts == hosts[0]).all() and hosts[0] >= 0:
            out[i] = FAST
        elif len(set(hosts.tolist())) == len(ranks):
            out[i] = SLOW
    return out


def _medians(key: IntArray, value: IntArray) -> tuple[IntArray, FloatArray]:
    """(distinct keys, numpy's median of ``value`` per key)."""
    k, v = _sorted_pairs(key, value)
    starts = np.flatnonzero(np.concatenate([[True], k[1:] != k[:-1]])) if len(k) else np.zeros(0, np.int64)
    counts = np.diff(np.concatenate([starts, [len(k)]]))
    lo = v[starts + (counts - 1) // 2].astype(np.float64)
    hi = v[starts + counts // 2].astype(np.float64)
    med = np.where(counts % 2 == 1, lo, (lo + hi) / 2)
    return k[starts], med


def _sorted_pairs(key: IntArray, value: IntArray) -> tuple[IntArray, IntArray]:
    """(key, value) pairs sorted by key then value: one sort of a combined integer when both
    ranges fit in 62 bits (numpy's vectorised int64 sort, several times a two-key lexsort)."""
    if len(key):
        k0, v0 = int(key.min()), int(value.min())
        span_v = int(value.max()) - v0 + 1
        if (int(key.max()) - k0 + 1) * span_v < 1 << 62:
            both = np.sort((key - k0) * span_v + (value - v0))
            return both // span_v + k0, both % span_v + v0
    order = np.lexsort((value, key))
    return key[order], value[order]


def summarise(ev: EventArrays, host_of_rank: IntArray, phases: Sequence[str]) -> dict[str, Any]:
    """The What-if's event inputs (see the module doc), as the service hands them on."""
    keyed = (ev.step >= 0) & (ev.layer >= 0)
    step, layer, phase = ev.step[keyed], ev.layer[keyed], ev.phase[keyed]
    n_p, n_l = len(phases), int(layer.max()) + 1 if len(layer) else 1
    code = (step * n_l + layer) * n_p + phase  # one int per (step, layer, phase)
    keys, start = _medians(code, ev.start_ns[keyed])
    _, end = _medians(code, ev.end_ns[keyed])
    inv = np.searchsorted(keys, code)  # keys: the sorted distinct codes
    sent = np.bincount(inv, weights=ev.bytes_sent[keyed].astype(np.float64), minlength=len(keys))
    names = [(int(c // (n_l * n_p)), int(c // n_p % n_l), phases[int(c % n_p)]) for c in keys.tolist()]
    cls = group_classes(ev.groups, host_of_rank)[ev.group] if ev.groups else np.zeros(len(ev.step), np.int64)
    dur = (ev.end_ns - ev.start_ns) / 1e9
    timed = (dur > 0) & (ev.bytes_sent > 0)
    rate = np.divide(ev.bytes_sent.astype(np.float64), dur, out=np.zeros(len(dur)), where=timed)
    fast, slow = rate[timed & (cls == FAST)], rate[timed & (cls == SLOW)]
    sizes = {}
    for name in SIZED:
        if name in phases:
            b = ev.bytes_sent[ev.phase == phases.index(name)]
            if len(b):
                sizes[name] = float(np.median(b))
    return {
        "start_s": {k: float(v) / 1e9 for k, v in zip(names, start.tolist(), strict=True)},
        "end_s": {k: float(v) / 1e9 for k, v in zip(names, end.tolist(), strict=True)},
        "bytes": {k: float(v) for k, v in zip(names, sent.tolist(), strict=True)},
        "ratio": measured_ratio(fast, slow),
        "rate_samples": {"fast": len(fast), "slow": len(slow)},
        "sizes": sizes,
    }
