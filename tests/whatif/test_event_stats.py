"""The What-if's event inputs as array operations equal the per-event loop they replaced (the
service's ``_events`` before issue 17, kept below as the reference): medians per (step, layer,
phase), byte sums, the timed collectives' fast/slow split and the sized collectives' medians."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pytest

from collectors.traces.schema import PHASES
from fabricmon.core.whatif import event_stats
from fabricmon.core.whatif.terrace_run import measured_ratio


def _reference(cols: dict[str, Any], host_of_rank: np.ndarray) -> dict[str, Any]:
    """The loop as it was (one event at a time)."""
    starts: dict[Any, list[int]] = defaultdict(list)
    ends: dict[Any, list[int]] = defaultdict(list)
    sent: dict[Any, float] = defaultdict(float)
    fast, slow = [], []
    sizes: dict[str, list[int]] = defaultdict(list)
    for i in range(len(cols["step"])):
        phase = PHASES[int(cols["phase"][i])]
        key = (int(cols["step"][i]), int(cols["layer"][i]), phase)
        start, end = int(cols["start_ns"][i]), int(cols["end_ns"][i])
        if key[0] >= 0 and key[1] >= 0:
            starts[key].append(start)
            ends[key].append(end)
            sent[key] += float(cols["bytes_sent"][i])
        if phase in event_stats.SIZED:
            sizes[phase].append(int(cols["bytes_sent"][i]))
        ranks = [int(x) for x in cols["pg_ranks"][i].split(",") if x.strip().isdigit()]
        ranks = [r for r in ranks if 0 <= r < len(host_of_rank)]
        dur = (end - start) / 1e9
        if len(ranks) > 1 and dur > 0 and cols["bytes_sent"][i] > 0:
            hosts = host_of_rank[ranks]
            if (hosts == hosts[0]).all() and hosts[0] >= 0:
                fast.append(float(cols["bytes_sent"][i]) / dur)
            elif len(set(hosts.tolist())) == len(ranks):
                slow.append(float(cols["bytes_sent"][i]) / dur)
    return {
        "start_s": {k: float(np.median(v)) / 1e9 for k, v in starts.items()},
        "end_s": {k: float(np.median(v)) / 1e9 for k, v in ends.items()},
        "bytes": dict(sent),
        "ratio": measured_ratio(np.asarray(fast), np.asarray(slow)),
        "rate_samples": {"fast": len(fast), "slow": len(slow)},
        "sizes": {k: float(np.median(v)) for k, v in sizes.items() if v},
    }


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_array_summary_equals_the_per_event_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 5000
    host_of_rank = np.repeat(np.arange(4), 4)
    host_of_rank[15] = -1  # one unplaced rank
    groups = ["0,1,2,3", "0,4,8,12", "1,5", "3,15", "0", "", "2,6,10,99", "12,13,14,15", "x,1,2"]
    start = 1_800_000_000_000_000_000 + rng.integers(0, 10**9, n)
    cols = {
        "step": rng.integers(-1, 6, n), "layer": rng.integers(-1, 3, n),
        "phase": rng.choice([PHASES.index(p) for p in ("dispatch", "combine", "allreduce", "allgather")], n),
        "start_ns": start, "end_ns": start + rng.integers(0, 3, n) * rng.integers(1, 10**6, n),
        "bytes_sent": rng.integers(0, 3, n) * rng.integers(1, 10**9, n),
        "pg_ranks": [groups[i] for i in rng.integers(0, len(groups), n)],
    }
    index: dict[str, int] = {}
    ev = event_stats.EventArrays(*(np.asarray(cols[k], dtype=np.int64) for k in
                                   ("step", "layer", "phase", "start_ns", "end_ns", "bytes_sent")),
                                 group=event_stats.factorise(cols["pg_ranks"], index), groups=tuple(index))
    got, want = event_stats.summarise(ev, host_of_rank, PHASES), _reference(cols, host_of_rank)
    assert got["rate_samples"] == want["rate_samples"] and want["rate_samples"]["fast"] > 0
    assert got == want
